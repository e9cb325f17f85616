#include "cli/client/submit_flags.h"

#include <algorithm>

#include "cli/client/units.h"
#include "cli/usage.h"
#include "common/strings.h"

namespace gpupool::cli {
namespace {

// A single-valued option: the last occurrence wins, like most Unix tools. `names` may
// hold a short option and Slurm's spelling beside gpupool's ("-J,--name,--job-name");
// `value` names the value in the help ("DURATION").
void Single(CLI::App& app, const std::string& names, std::optional<std::string>* out,
            const std::string& value, const std::string& help) {
  app.add_option_function<std::string>(
         names, [out](const std::string& v) { *out = v; }, help)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->type_name(value);
}

// A repeatable option, each occurrence one value (a comma list when `comma`), appended.
void Repeated(CLI::App& app, const std::string& names, std::vector<std::string>* out,
              const std::string& value, const std::string& help, bool comma) {
  CLI::Option* o = app.add_option_function<std::vector<std::string>>(
                          names,
                          [out](const std::vector<std::string>& v) {
                            out->insert(out->end(), v.begin(), v.end());
                          },
                          help)
                       ->allow_extra_args(false)
                       ->type_name(value);
  if (comma) o->delimiter(',');
}

// Splits one directive's text into words: '...' keeps everything, "..." and bare words
// honour backslash escapes, and an unquoted # at the start of a word begins a comment.
Result<std::vector<std::string>> SplitWords(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      ++i;
    } else if (c == '#' && !in_word) {
      break;
    } else if (c == '\'') {
      const size_t end = text.find('\'', i + 1);
      if (end == std::string_view::npos) return Status::InvalidArgument("unterminated ' quote");
      word.append(text.substr(i + 1, end - i - 1));
      in_word = true;
      i = end + 1;
    } else if (c == '"') {
      ++i;
      bool closed = false;
      while (i < text.size()) {
        if (text[i] == '"') {
          closed = true;
          ++i;
          break;
        }
        if (text[i] == '\\' && i + 1 < text.size()) ++i;
        word += text[i++];
      }
      if (!closed) return Status::InvalidArgument("unterminated \" quote");
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word += text[i + 1];
      in_word = true;
      i += 2;
    } else {
      word += c;
      in_word = true;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace

void AddSubmitOptions(CLI::App& app, SubmitFlags* f) {
  // Short options and second long names are sbatch's (docs/slurm.md): each is the same
  // option as gpupool's own name, never a different meaning.
  Single(app, "-G,--gpus,--gpus-per-task", &f->gpus, "N",
         "whole GPUs per task (default 0; Slurm's -G counts per job, the same for one task)");
  Single(app, "--gpu-share", &f->gpu_share, "SHARE",
         "a share of one GPU, e.g. 0.25 (implies --gpus 1)");
  Single(app, "--gpu-mem", &f->gpu_mem, "SIZE",
         "a share of one GPU sized by its memory, e.g. 20G (implies --gpus 1)");
  Repeated(app, "--gpu-model", &f->gpu_models, "MODEL",
           "allowed GPU models, repeatable or a comma list, e.g. A100,H100", true);
  Single(app, "--min-capability", &f->min_capability, "X.Y",
         "minimum compute capability, e.g. 8.0");
  Single(app, "--vendor", &f->vendor, "VENDOR", "nvidia or amd");
  Single(app, "-c,--cpus,--cpus-per-task", &f->cpus, "N",
         "CPUs per task, e.g. 2 or 0.5 (default 1)");
  Single(app, "--mem", &f->mem, "SIZE", "memory per task, e.g. 16G (binary units)");
  Single(app, "-t,--time", &f->time, "DURATION",
         "time limit: 1:30:00, 90m, 2h, 45s or 1-00:00:00; a plain number is minutes");
  Single(app, "--signal", &f->signal, "[B:]SIG[@SECONDS]",
         "send SIG (USR1, 10, ...) SECONDS (default 60) before the time limit (--time), to "
         "every process of the job, or with B: to its main process (the script's shell) only");
  Single(app, "-J,--name,--job-name", &f->name, "NAME", "job name");
  Single(app, "--project", &f->project, "PROJECT", "project to account the usage to");
  Single(app, "--priority", &f->priority, "N", "priority within your own jobs (default 0)");
  Repeated(app, "--env", &f->env, "NAME=VALUE|NAME:VERSION",
           "NAME=VALUE sets a variable (repeatable); NAME:VERSION runs in a named environment "
           "(gpupool env list)",
           false);
  Repeated(app, "--mount", &f->mounts, "SRC:DST[:ro]",
           "bind-mount SRC:DST[:ro] into a container job (repeatable)", false);
  Single(app, "-D,--workdir,--chdir", &f->workdir, "DIR",
         "working directory (default: the current directory)");
  Single(app, "-n,--tasks,--ntasks", &f->tasks, "N", "tasks placed together as a gang (default 1)");
  Single(app, "-N,--nodes", &f->nodes, "1",
         "only 1, for a one-task job: gpupool places tasks (-n), not nodes");
  Single(app, "--image", &f->image, "REF", "run in this container image");
  Single(app, "--shm-size", &f->shm_size, "SIZE",
         "size of a container job's /dev/shm, e.g. 8G (podman's default: 64M)");
  app.add_flag_function(
      "--init,!--no-init", [f](int64_t count) { f->init = count > 0; },
      "container jobs: run a small init as PID 1 that passes signals on (default: on)");
  Single(app, "-a,--array", &f->array, "SPEC",
         "one job per index: 0-99, 0-99%10 (at most 10 at once), 1,3,5-7, 0-30:10; each sees "
         "GPUPOOL_ARRAY_TASK_ID");
  Single(app, "--enforce", &f->enforce, "memory",
         "place a GPU share only where its memory limit is enforced (enforcement mps, mig or "
         "dmem in `gpupool nodes`); whole GPUs are never shared");
  app.add_flag_function(
      "--requeue,!--no-requeue", [f](int64_t count) { f->requeue = count > 0; },
      "requeue the job if its node is lost or a GPU it holds fails (default: off)");
  app.add_flag_function(
      "--preemptible", [f](int64_t count) { f->preemptible = count > 0; },
      "the scheduler may stop the job for a waiting job of yours of higher priority or of a "
      "user below their fair share, once it ran --min-runtime; it gets SIGTERM, --grace, "
      "then SIGKILL, and goes back to the queue (docs/preemption.md)");
  Single(app, "--min-runtime", &f->min_runtime, "DURATION",
         "with --preemptible: never preempted before it ran this long (default: the admin's "
         "`gpupool limits` entry, else the server's, 10m)");
  Single(app, "--grace", &f->grace, "DURATION",
         "with --preemptible: time between SIGTERM and SIGKILL when preempted (default and "
         "most: the admin's `gpupool limits` entry, else the server's, 120s)");
  app.add_flag_function(
      "-H,--hold", [f](int64_t count) { f->hold = count > 0; },
      "submit the job held: it waits until `gpupool release ID`");
  app.add_flag_function(
      "-W,--wait", [f](int64_t count) { f->wait = count > 0; },
      "stay until the job (every element of an array) has ended, and exit with its exit "
      "code: 0 when it succeeded, 1 when it did not exit by itself (a signal, cancelled, "
      "timed out, lost), an array's highest (sbatch --wait)");
  for (const char* kind : {"after-ok", "after-any", "after-not-ok"}) {
    const std::string k = kind;
    const std::string when = k == "after-ok" ? "has succeeded"
                             : k == "after-not-ok"
                                 ? "has failed (or was cancelled, timed out, lost)"
                                 : "has ended, however it ended";
    app.add_option_function<std::vector<std::string>>(
           "--" + k,
           [f, k](const std::vector<std::string>& v) {
             for (const std::string& id : v) f->dependencies.push_back(k + ":" + id);
           },
           "start only once each job ID " + when +
               "; ID[,ID...] (ARRAY_INDEX for one element of an array), repeatable")
        ->allow_extra_args(false)
        ->delimiter(',')
        ->type_name("ID");
  }
  Repeated(app, "-d,--dependency", &f->slurm_dependencies, "TYPE:ID[:ID][,TYPE:ID]",
           "Slurm's form of --after-ok, --after-any and --after-not-ok: afterok:ID[:ID...], "
           "afterany:ID, afternotok:ID, comma-separated (all must hold)",
           false);
  Single(app, "-w,--nodelist", &f->nodelist, "NODELIST",
         "run every task on one of these nodes: names or a Slurm hostlist, e.g. "
         "node0,gpu[01-04] (unlike Slurm, not every listed node need be used)");
  Single(app, "-x,--exclude", &f->exclude, "NODELIST",
         "run no task on these nodes: names or a Slurm hostlist, e.g. gpu[01-02]");
  Single(app, "-p,--partition", &f->partition, "PARTITION",
         "refused: gpupool has no partitions (choose GPUs with --gpu-model, --vendor, "
         "--min-capability)");
  Single(app, "--export", &f->export_env, "ALL|NONE|[ALL,]NAME[=VALUE],...",
         "the submitting shell's variables the job gets: ALL (default; not for --image jobs), "
         "NONE, or only the NAMEs listed (ALL,NAME=VALUE adds to all)");
  Single(app, "-o,--output", &f->output, "PATTERN",
         "submit: stdout's file (and stderr's without -e), relative to the workdir; %j job id, "
         "%a/%A array index/id, %x name, %u user, %N node, %t task (default gpupool-%j.out)");
  Single(app, "-e,--error", &f->error, "PATTERN", "submit: stderr's file (patterns as -o)");
  app.add_flag_function(
      "--mpi", [f](int64_t count) { f->mpi = count > 0; },
      "run the command in task 0 only and hold the other tasks for it (mpirun --hostfile "
      "$GPUPOOL_HOSTFILE starts its ranks there through gpupool exec)");
}

Result<std::vector<Directive>> ReadScriptDirectives(std::string_view text,
                                                    std::string_view script_name) {
  std::vector<Directive> out;
  std::vector<std::string> lines = Split(text, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = Trim(lines[i]);
    if (i == 0 && StartsWith(line, "#!")) continue;
    if (line.empty()) continue;
    if (line[0] != '#') break;  // the leading comment block ends here
    const bool sbatch = StartsWith(line, "#SBATCH");
    const std::string_view tag = sbatch ? "#SBATCH" : "#GPUPOOL";
    if (!StartsWith(line, tag)) continue;
    const std::string_view rest = line.substr(tag.size());
    if (!rest.empty() && rest[0] != ' ' && rest[0] != '\t') continue;  // e.g. "#GPUPOOLX"
    auto words = SplitWords(rest);
    if (!words.ok()) {
      return Status::InvalidArgument(std::string(script_name) + ":" + std::to_string(i + 1) + ": " +
                                     std::string(tag) + " line: " + words.status().message());
    }
    if (!words->empty()) out.push_back({static_cast<int>(i + 1), std::move(words).value(), sbatch});
  }
  return out;
}

namespace {

// The sizes a #GPUPOOL line set (`before` is the flags before it), checked as
// BuildSubmission checks them, so that a bad one is reported with its line.
Status CheckLineSizes(const SubmitFlags& before, const SubmitFlags& after) {
  struct Size {
    std::string_view option;
    std::optional<std::string> SubmitFlags::*value;
    bool zero_is_none;  // --mem 0: no explicit request; --gpu-mem and --shm-size need more
  };
  for (const Size& s :
       {Size{"--mem", &SubmitFlags::mem, true}, Size{"--gpu-mem", &SubmitFlags::gpu_mem, false},
        Size{"--shm-size", &SubmitFlags::shm_size, false}}) {
    const std::optional<std::string>& v = after.*s.value;
    if (!v || v == before.*s.value) continue;
    Result<uint64_t> bytes = ParseMemorySize(*v);
    std::string why = bytes.ok() ? "" : bytes.status().message();
    if (bytes.ok() && *bytes == 0 && !s.zero_is_none) why = "must be more than 0";
    if (!why.empty()) {
      return Status::InvalidArgument(std::string(s.option) + " " + *v + ": " + why);
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

bool IsOptionWord(std::string_view w) { return w.size() > 1 && w[0] == '-'; }

// Why an #SBATCH option is left out, and what to write instead.
std::string WhyIgnored(const CLI::App& parser, const std::string& name) {
  if (name == "-p" || name == "--partition") {
    return "gpupool has no partitions: every job may run on every node it fits (choose GPUs "
           "with --gpu-model, --vendor or --min-capability)";
  }
  // gpupool's options that sbatch has too, meaning something else there (--priority is
  // an admin's in Slurm; --json prints another answer).
  static constexpr std::string_view kOtherMeaning[] = {"--priority", "--json"};
  if (std::find(std::begin(kOtherMeaning), std::end(kOtherMeaning), name) !=
      std::end(kOtherMeaning)) {
    return "it means something else in Slurm; write gpupool's option on a #GPUPOOL line";
  }
  if (parser.get_option_no_throw(name) != nullptr) {
    return "not an sbatch option (a gpupool one): write it on a #GPUPOOL line, which takes "
           "gpupool's options";
  }
  const std::string why = ExplainUnknown(parser, name, "gpupool submit");
  if (const size_t at = why.find("`: "); at != std::string::npos) return why.substr(at + 3);
  return "gpupool has no such option (docs/slurm.md)";
}

// An #SBATCH --begin (-b) is refused, not ignored as other options are: left out, the job
// would start at once although its user asked for a later start.
Status RefuseDeferredStart(const CLI::App& parser, const Directive& d,
                           std::string_view script_name) {
  for (const std::string& word : d.words) {
    if (!IsOptionWord(word)) continue;
    std::string name = word.substr(0, word.find('='));
    if (name.size() > 2 && name[1] != '-') name.resize(2);  // -bnow
    if (name != "--begin" && name != "-b") continue;
    return Status::InvalidArgument(std::string(script_name) + ":" + std::to_string(d.line) +
                                   ": #SBATCH " + word + ": " + WhyIgnored(parser, name));
  }
  return Status::Ok();
}

// The words of an #SBATCH line that gpupool reads (kSbatchOptions with their values); the
// rest go into *ignored, one entry per option with the values after it. *per_job_gpus
// is set to Slurm's -G/--gpus as written, a count for the whole job (cleared by a later
// --gpus-per-task, which replaces it).
std::vector<std::string> SbatchWords(const CLI::App& parser, const Directive& d,
                                     std::string_view script_name,
                                     std::vector<std::string>* ignored, std::string* per_job_gpus) {
  static constexpr std::string_view kFlags[] = {"-H",           "--hold", "--requeue",
                                                "--no-requeue", "-W",     "--wait"};
  const std::vector<std::string>& w = d.words;
  std::vector<std::string> kept;
  for (size_t i = 0; i < w.size();) {
    const std::string& word = w[i];
    std::string name = word.substr(0, word.find('='));
    if (name.size() > 2 && name[1] != '-') name.resize(2);  // -G2, -t60
    size_t end = i + 1;
    const bool read = IsOptionWord(word) &&
                      std::find(std::begin(kSbatchOptions), std::end(kSbatchOptions), name) !=
                          std::end(kSbatchOptions);
    if (read) {
      const bool flag = std::find(std::begin(kFlags), std::end(kFlags), name) != std::end(kFlags);
      if (!flag && name.size() == word.size() && end < w.size()) ++end;  // the value after it
      if (name == "-G" || name == "--gpus" || name == "--gpus-per-task") per_job_gpus->clear();
      kept.insert(kept.end(), w.begin() + static_cast<ptrdiff_t>(i),
                  w.begin() + static_cast<ptrdiff_t>(end));
      if (name == "-G" || name == "--gpus") {
        for (size_t k = i; k < end; ++k) *per_job_gpus += (k > i ? " " : "") + w[k];
      }
    } else {
      while (end < w.size() && !IsOptionWord(w[end])) ++end;
      std::string text;
      for (size_t k = i; k < end; ++k) text += (k > i ? " " : "") + w[k];
      if (ignored != nullptr) {
        ignored->push_back(
            std::string(script_name) + ":" + std::to_string(d.line) + ": #SBATCH " + text +
            " ignored: " +
            (IsOptionWord(word) ? WhyIgnored(parser, name) : "not an option (docs/slurm.md)"));
      }
    }
    i = end;
  }
  return kept;
}

// One line's words parsed into *flags by a fresh parser, so that an error names its line.
Status ParseLine(const std::vector<std::string>& words, const std::string& where,
                 SubmitFlags* flags) {
  CLI::App parser;
  parser.set_help_flag();
  AddSubmitOptions(parser, flags);
  std::vector<std::string> args(words.rbegin(), words.rend());  // CLI11 wants reverse
  std::vector<std::string> again = args;                        // parse consumes its words
  const SubmitFlags before = *flags;
  try {
    parser.parse(args);
  } catch (const CLI::ParseError& e) {
    std::string why = e.what();
    for (const std::string& word : parser.remaining()) {
      if (std::string s = ExplainUnknown(parser, word, "gpupool submit"); !s.empty()) {
        why = std::move(s);
        break;
      }
    }
    return Status::InvalidArgument(where + why);
  }
  if (Status s = CheckLineSizes(before, *flags); !s.ok()) {
    return Status::InvalidArgument(where + s.message());
  }
  // The line's own values again, alone (the parse above added them to every line's), so
  // that a bad count, duration or signal is refused naming this line.
  SubmitFlags own;
  CLI::App alone;
  alone.set_help_flag();
  AddSubmitOptions(alone, &own);
  try {
    alone.parse(again);
  } catch (const CLI::ParseError&) {
    return Status::Ok();  // the same words parsed above
  }
  if (Status s = CheckLineValues(own); !s.ok()) {
    return Status::InvalidArgument(where + s.message());
  }
  return Status::Ok();
}

}  // namespace

Result<SubmitFlags> ParseDirectives(const std::vector<Directive>& directives,
                                    std::string_view script_name,
                                    std::vector<std::string>* ignored) {
  SubmitFlags gpupool;
  SubmitFlags sbatch;
  CLI::App options;  // what gpupool's options are, for the names of ignored ones
  SubmitFlags unused;
  AddSubmitOptions(options, &unused);
  std::string per_job_gpus;  // Slurm's -G/--gpus on an #SBATCH line, as written
  std::string where_gpus;
  for (const Directive& d : directives) {
    const std::string where = std::string(script_name) + ":" + std::to_string(d.line) + ": " +
                              (d.sbatch ? "#SBATCH" : "#GPUPOOL") + " line: ";
    if (!d.sbatch) {
      GP_RETURN_IF_ERROR(ParseLine(d.words, where, &gpupool));
      continue;
    }
    GP_RETURN_IF_ERROR(RefuseDeferredStart(options, d, script_name));
    const std::string before = per_job_gpus;
    const std::vector<std::string> words =
        SbatchWords(options, d, script_name, ignored, &per_job_gpus);
    if (per_job_gpus != before) where_gpus = where;
    if (!words.empty()) GP_RETURN_IF_ERROR(ParseLine(words, where, &sbatch));
  }
  // Checked once the command line is merged too (CheckPerJobGpus): its -n counts as well.
  if (!per_job_gpus.empty() && sbatch.gpus) sbatch.per_job_gpus = where_gpus + per_job_gpus;
  return MergeFlags(sbatch, gpupool);
}

Status CheckPerJobGpus(const SubmitFlags& merged) {
  if (merged.per_job_gpus.empty() || !merged.gpus || !merged.tasks || Trim(*merged.tasks) == "1") {
    return Status::Ok();  // one task (the default): per job and per task are the same
  }
  return Status::InvalidArgument(
      merged.per_job_gpus + " with --ntasks " + *merged.tasks +
      ": Slurm counts --gpus for the whole job, gpupool per task; write #SBATCH "
      "--gpus-per-task N (the GPUs each task needs), or give --gpus N (per task) on the "
      "command line");
}

SubmitFlags MergeFlags(const SubmitFlags& script, const SubmitFlags& cmdline) {
  SubmitFlags m = script;
  auto over = [](std::optional<std::string>* into, const std::optional<std::string>& v) {
    if (v) *into = v;
  };
  over(&m.gpus, cmdline.gpus);
  if (cmdline.gpus) m.per_job_gpus = cmdline.per_job_gpus;
  over(&m.gpu_share, cmdline.gpu_share);
  over(&m.gpu_mem, cmdline.gpu_mem);
  // A share asked for on the command line replaces the script's way of sizing it, so a
  // script's --gpu-mem and a command line --gpu-share do not conflict.
  if (cmdline.gpu_share && !cmdline.gpu_mem) m.gpu_mem.reset();
  if (cmdline.gpu_mem && !cmdline.gpu_share) m.gpu_share.reset();
  if (!cmdline.gpu_models.empty()) m.gpu_models = cmdline.gpu_models;
  over(&m.min_capability, cmdline.min_capability);
  over(&m.vendor, cmdline.vendor);
  over(&m.cpus, cmdline.cpus);
  over(&m.mem, cmdline.mem);
  over(&m.time, cmdline.time);
  over(&m.signal, cmdline.signal);
  over(&m.name, cmdline.name);
  over(&m.project, cmdline.project);
  over(&m.priority, cmdline.priority);
  m.env.insert(m.env.end(), cmdline.env.begin(), cmdline.env.end());
  m.mounts.insert(m.mounts.end(), cmdline.mounts.begin(), cmdline.mounts.end());
  over(&m.workdir, cmdline.workdir);
  over(&m.tasks, cmdline.tasks);
  over(&m.image, cmdline.image);
  if (cmdline.requeue) m.requeue = cmdline.requeue;
  if (cmdline.preemptible) m.preemptible = cmdline.preemptible;
  over(&m.min_runtime, cmdline.min_runtime);
  over(&m.grace, cmdline.grace);
  over(&m.enforce, cmdline.enforce);
  if (cmdline.mpi) m.mpi = cmdline.mpi;
  over(&m.array, cmdline.array);
  over(&m.shm_size, cmdline.shm_size);
  if (cmdline.init) m.init = cmdline.init;
  m.dependencies.insert(m.dependencies.end(), cmdline.dependencies.begin(),
                        cmdline.dependencies.end());
  m.slurm_dependencies.insert(m.slurm_dependencies.end(), cmdline.slurm_dependencies.begin(),
                              cmdline.slurm_dependencies.end());
  if (cmdline.hold) m.hold = cmdline.hold;
  if (cmdline.wait) m.wait = cmdline.wait;
  over(&m.nodes, cmdline.nodes);
  over(&m.partition, cmdline.partition);
  over(&m.nodelist, cmdline.nodelist);
  over(&m.exclude, cmdline.exclude);
  over(&m.export_env, cmdline.export_env);
  over(&m.output, cmdline.output);
  over(&m.error, cmdline.error);
  return m;
}

}  // namespace gpupool::cli
