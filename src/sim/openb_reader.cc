#include "sim/openb_reader.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/strings.h"
#include "sim/mig_layout.h"

namespace gpupool::sim {

Result<std::vector<sched::NodeSpec>> ReadOpenbNodes(const std::string& path) {
  GP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(path));
  return ParseOpenbNodes(table);
}

Result<std::vector<sched::NodeSpec>> ParseOpenbNodes(const CsvTable& t) {
  GP_RETURN_IF_ERROR(t.RequireColumns({"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  const bool has_mig = t.HasColumn("mig");
  std::vector<sched::NodeSpec> out;
  out.reserve(t.num_rows());
  for (size_t r = 0; r < t.num_rows(); ++r) {
    sched::NodeSpec n;
    n.name = std::string(Trim(t.Field(r, "sn")));
    if (n.name.empty()) {
      return Status::InvalidArgument(t.Where(r, "sn") + " is empty; every node needs a name");
    }
    GP_ASSIGN_OR_RETURN(n.cpu_milli, t.Int(r, "cpu_milli", 0));
    GP_ASSIGN_OR_RETURN(n.memory_mib, t.Int(r, "memory_mib", 0));
    GP_ASSIGN_OR_RETURN(int64_t gpus, t.Int(r, "gpu", 0));
    if (gpus > 64) {
      return Status::InvalidArgument(
          fmt::format("{} is {}; at most 64 GPUs per node are supported", t.Where(r, "gpu"), gpus));
    }
    n.num_gpus = static_cast<int32_t>(gpus);
    n.gpu_model = std::string(Trim(t.Field(r, "model")));
    if (n.num_gpus > 0 && n.gpu_model.empty()) {
      return Status::InvalidArgument(t.Where(r, "model") +
                                     " is empty for a node with GPUs; give the GPU model");
    }
    if (n.num_gpus == 0) n.gpu_model.clear();
    if (has_mig && !Trim(t.Field(r, "mig")).empty()) {
      if (n.num_gpus == 0) {
        return Status::InvalidArgument(t.Where(r, "mig") +
                                       " gives a MIG layout for a node without GPUs");
      }
      Result<MigLayout> layout = ParseMigLayout(t.Field(r, "mig"));
      Status applied = layout.ok() ? ApplyMigLayout(*layout, n) : layout.status();
      if (!applied.ok())
        return Status::InvalidArgument(t.Where(r, "mig") + ": " + applied.message());
    }
    out.push_back(std::move(n));
  }
  return out;
}

Result<std::vector<sched::Task>> ReadOpenbPods(const std::string& path) {
  GP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(path));
  return ParseOpenbPods(table);
}

namespace {

// The pod's allowed GPU models from gpu_spec ("V100M16|T4"), sorted and distinct.
std::vector<std::string> GpuModels(std::string_view spec) {
  std::vector<std::string> models;
  for (const std::string& m : Split(spec, '|')) {
    std::string model(Trim(m));
    if (model.empty()) continue;
    if (std::find(models.begin(), models.end(), model) == models.end()) {
      models.push_back(std::move(model));
    }
  }
  std::sort(models.begin(), models.end());
  return models;
}

}  // namespace

Result<std::vector<sched::Task>> ParseOpenbPods(const CsvTable& t) {
  GP_RETURN_IF_ERROR(t.RequireColumns({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}));
  std::vector<sched::Task> out;
  out.reserve(t.num_rows());
  for (size_t r = 0; r < t.num_rows(); ++r) {
    sched::Task task;
    task.name = std::string(Trim(t.Field(r, "name")));
    if (task.name.empty()) {
      return Status::InvalidArgument(t.Where(r, "name") + " is empty; every pod needs a name");
    }
    GP_ASSIGN_OR_RETURN(task.cpu_milli, t.Int(r, "cpu_milli", 0));
    GP_ASSIGN_OR_RETURN(task.memory_mib, t.Int(r, "memory_mib", 0));
    GP_ASSIGN_OR_RETURN(int64_t num_gpu, t.Int(r, "num_gpu", 0));
    GP_ASSIGN_OR_RETURN(int64_t gpu_milli, t.Int(r, "gpu_milli", 0));
    const std::string where = t.Where(r, "gpu_milli");
    if (num_gpu > 64) {
      return Status::InvalidArgument(fmt::format("{} is {}; at most 64 GPUs per task are supported",
                                                 t.Where(r, "num_gpu"), num_gpu));
    }
    if (gpu_milli > 1000) {
      return Status::InvalidArgument(
          fmt::format("{} is {}; a GPU share is at most 1000 thousandths", where, gpu_milli));
    }
    if (num_gpu > 1 && gpu_milli < 1000) {
      return Status::InvalidArgument(fmt::format(
          "{} is {} with num_gpu {}; fractional shares need num_gpu 1", where, gpu_milli, num_gpu));
    }
    if ((num_gpu == 0) != (gpu_milli == 0)) {
      return Status::InvalidArgument(
          fmt::format("{} is {} with num_gpu {}; give both or neither", where, gpu_milli, num_gpu));
    }
    task.num_gpu = static_cast<int32_t>(num_gpu);
    task.gpu_milli = static_cast<int32_t>(gpu_milli);
    if (task.num_gpu > 0) task.gpu_models = GpuModels(t.Field(r, "gpu_spec"));
    if (Status s = sched::ValidateTask(task); !s.ok()) {
      return Status::InvalidArgument(fmt::format("{}:{}: {}", t.source(), t.Line(r), s.message()));
    }
    out.push_back(std::move(task));
  }
  return out;
}

std::string WorkloadName(const std::string& pods_path) {
  std::string name = pods_path;
  if (auto slash = name.find_last_of('/'); slash != std::string::npos)
    name = name.substr(slash + 1);
  if (name.size() > 4 && name.substr(name.size() - 4) == ".csv") name.resize(name.size() - 4);
  return name;
}

}  // namespace gpupool::sim
