// AgentLoop's batch I/O (agent_loop.h): a batch task's script copy and its output files
// (-o/-e) named for this node and task, and the output files `gpupool logs` may read
// through this agent.
#include "agent/runtime/agent_loop.h"
#include "jobs/output_pattern.h"

namespace gpupool::agent {

// The output files `gpupool logs` may read through this agent: the newest
// kMaxOutputFiles of them, so that a long-lived agent's memory stays bounded.
void AgentLoop::RememberOutputLocked(const agent::LaunchSpec& spec) {
  for (const std::string* path : {&spec.stdout_file, &spec.stderr_file}) {
    if (path->empty()) continue;
    if (output_files_.insert_or_assign(*path, spec.uid).second) output_order_.push_back(*path);
  }
  while (output_order_.size() > kMaxOutputFiles) {
    output_files_.erase(output_order_.front());
    output_order_.pop_front();
  }
}

// A batch task's script copy and output files (-o/-e), named for this node and task.
Status AgentLoop::BatchIo(const jobs::Job& job, int task, agent::LaunchSpec* spec) const {
  spec->script = job.script.get();
  if (job.output.empty()) return Status::Ok();
  const jobs::OutputFields fields = jobs::OutputFieldsOf(job, options_.node_name, task);
  GP_ASSIGN_OR_RETURN(spec->stdout_file, jobs::OutputPath(job.output, fields, job.workdir));
  spec->stderr_file = spec->stdout_file;
  if (!job.error.empty()) {
    GP_ASSIGN_OR_RETURN(spec->stderr_file, jobs::OutputPath(job.error, fields, job.workdir));
  }
  return Status::Ok();
}

}  // namespace gpupool::agent
