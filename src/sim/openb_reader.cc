#include "sim/openb_reader.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/strings.h"

namespace gpupool::sim {

Result<std::vector<sched::NodeSpec>> ReadOpenbNodes(const std::string& path) {
  GP_ASSIGN_OR_RETURN(CsvFile table, CsvFile::Read(path));
  return ParseOpenbNodes(table);
}

Result<std::vector<sched::NodeSpec>> ParseOpenbNodes(const CsvFile& t) {
  GP_ASSIGN_OR_RETURN(int32_t c_name, t.Required("sn"));
  GP_ASSIGN_OR_RETURN(int32_t c_cpu, t.Required("cpu_milli"));
  GP_ASSIGN_OR_RETURN(int32_t c_mem, t.Required("memory_mib"));
  GP_ASSIGN_OR_RETURN(int32_t c_gpu, t.Required("gpu"));
  GP_ASSIGN_OR_RETURN(int32_t c_model, t.Required("model"));
  std::vector<sched::NodeSpec> out;
  out.reserve(t.rows().size());
  for (const auto& row : t.rows()) {
    sched::NodeSpec n;
    GP_ASSIGN_OR_RETURN(std::string_view name, t.Field(row, c_name));
    if (name.empty()) {
      return Status::InvalidArgument(t.Where(row, c_name) + " is empty; every node needs a name");
    }
    n.name = std::string(name);
    GP_ASSIGN_OR_RETURN(n.cpu_milli, t.NonNegativeInt(row, c_cpu));
    GP_ASSIGN_OR_RETURN(n.memory_mib, t.NonNegativeInt(row, c_mem));
    GP_ASSIGN_OR_RETURN(int64_t gpus, t.NonNegativeInt(row, c_gpu));
    if (gpus > 64) {
      return Status::InvalidArgument(fmt::format("{} is {}; at most 64 GPUs per node are supported",
                                                 t.Where(row, c_gpu), gpus));
    }
    n.num_gpus = static_cast<int32_t>(gpus);
    GP_ASSIGN_OR_RETURN(std::string_view model, t.Field(row, c_model));
    n.gpu_model = std::string(model);
    if (n.num_gpus > 0 && n.gpu_model.empty()) {
      return Status::InvalidArgument(t.Where(row, c_model) +
                                     " is empty for a node with GPUs; give the GPU model");
    }
    if (n.num_gpus == 0) n.gpu_model.clear();
    out.push_back(std::move(n));
  }
  return out;
}

Result<std::vector<sched::Task>> ReadOpenbPods(const std::string& path) {
  GP_ASSIGN_OR_RETURN(CsvFile table, CsvFile::Read(path));
  return ParseOpenbPods(table);
}

Result<std::vector<sched::Task>> ParseOpenbPods(const CsvFile& t) {
  GP_ASSIGN_OR_RETURN(int32_t c_name, t.Required("name"));
  GP_ASSIGN_OR_RETURN(int32_t c_cpu, t.Required("cpu_milli"));
  GP_ASSIGN_OR_RETURN(int32_t c_mem, t.Required("memory_mib"));
  GP_ASSIGN_OR_RETURN(int32_t c_num, t.Required("num_gpu"));
  GP_ASSIGN_OR_RETURN(int32_t c_milli, t.Required("gpu_milli"));
  const int32_t c_spec = t.Column("gpu_spec");  // optional
  std::vector<sched::Task> out;
  out.reserve(t.rows().size());
  for (const auto& row : t.rows()) {
    sched::Task task;
    GP_ASSIGN_OR_RETURN(std::string_view name, t.Field(row, c_name));
    if (name.empty()) {
      return Status::InvalidArgument(t.Where(row, c_name) + " is empty; every pod needs a name");
    }
    task.name = std::string(name);
    GP_ASSIGN_OR_RETURN(task.cpu_milli, t.NonNegativeInt(row, c_cpu));
    GP_ASSIGN_OR_RETURN(task.memory_mib, t.NonNegativeInt(row, c_mem));
    GP_ASSIGN_OR_RETURN(int64_t num_gpu, t.NonNegativeInt(row, c_num));
    GP_ASSIGN_OR_RETURN(int64_t gpu_milli, t.NonNegativeInt(row, c_milli));
    if (num_gpu > 64) {
      return Status::InvalidArgument(fmt::format("{} is {}; at most 64 GPUs per task are supported",
                                                 t.Where(row, c_num), num_gpu));
    }
    if (gpu_milli > 1000) {
      return Status::InvalidArgument(fmt::format(
          "{} is {}; a GPU share is at most 1000 thousandths", t.Where(row, c_milli), gpu_milli));
    }
    if (num_gpu > 1 && gpu_milli < 1000) {
      return Status::InvalidArgument(
          fmt::format("{} is {} with num_gpu {}; fractional shares need num_gpu 1",
                      t.Where(row, c_milli), gpu_milli, num_gpu));
    }
    if ((num_gpu == 0) != (gpu_milli == 0)) {
      return Status::InvalidArgument(fmt::format("{} is {} with num_gpu {}; give both or neither",
                                                 t.Where(row, c_milli), gpu_milli, num_gpu));
    }
    task.num_gpu = static_cast<int32_t>(num_gpu);
    task.gpu_milli = static_cast<int32_t>(gpu_milli);
    GP_ASSIGN_OR_RETURN(std::string_view spec, t.Field(row, c_spec));
    if (!spec.empty() && task.num_gpu > 0) {
      for (const std::string& m : Split(spec, '|')) {
        std::string model(Trim(m));
        if (model.empty()) continue;
        if (std::find(task.gpu_models.begin(), task.gpu_models.end(), model) ==
            task.gpu_models.end()) {
          task.gpu_models.push_back(std::move(model));
        }
      }
      std::sort(task.gpu_models.begin(), task.gpu_models.end());
    }
    if (Status s = sched::ValidateTask(task); !s.ok()) {
      return Status::InvalidArgument(fmt::format("{}:{}: {}", t.path(), row.line, s.message()));
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
