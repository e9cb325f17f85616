#include "cli/usage.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <sstream>

#ifndef GPUPOOL_VERSION
#error "GPUPOOL_VERSION must be defined by the build (CMake's project version)"
#endif

namespace gpupool::cli {
namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of
// two neighbours (the commonest typo, "sumbit") each count one.
size_t EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  const size_t m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string Upper(std::string_view s) {
  std::string out;
  for (char c : s)
    out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool Hidden(const CLI::App* a) { return a->get_group().empty() || a->get_name().empty(); }

std::string JoinOr(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

// What a Slurm user's option is called here, for submit, run and alloc (docs/slurm.md):
// "did you mean" would offer -a for sbatch's -A (account) and -c for -C (constraint),
// options of another meaning. "" for an option Slurm does not have.
std::string SlurmHint(const std::string& path, const std::string& typed) {
  const std::string c = path.substr(path.rfind(' ') + 1);  // "gpupool submit": submit
  if (c != "submit" && c != "run" && c != "alloc") return "";
  struct Hint {
    std::vector<std::string_view> names;
    std::string_view text;
  };
  static const std::vector<Hint> kHints = {
      {{"-A", "--account"}, "Slurm's account is --project PROJECT here"},
      {{"-C", "--constraint"},
       "choose GPUs with --gpu-model (e.g. A100,H100), --vendor or --min-capability"},
      {{"--gres"}, "--gres=gpu:N is --gpus N here, --gres=gpu:a100:N is --gpus N --gpu-model A100"},
      {{"--mem-per-cpu", "--mem-per-gpu"}, "memory is asked per task here: --mem SIZE"},
      {{"--nice"}, "--priority N orders your own jobs"},
      {{"--parsable"}, "--json prints the new job for scripts"},
      {{"--container", "--container-image"}, "container jobs take --image REF"},
      {{"-q", "--qos"}, "gpupool has no QOS: limits are per user and project (`gpupool limits`)"},
      {{"--exclusive", "--ntasks-per-node"},
       "placement is the scheduler's: choose GPUs with --gpu-model, --vendor or "
       "--min-capability, nodes with -w/--nodelist or -x/--exclude, and the gang's size with "
       "-n"},
      {{"-b", "--begin"},
       "gpupool has no deferred start: submit the job when it should start, or submit it held "
       "(-H/--hold) and `gpupool release ID` it then"},
      {{"--deadline", "--mail-type", "--mail-user", "--test-only", "--licenses", "--open-mode"},
       "gpupool has no such option"},
  };
  for (const Hint& h : kHints) {
    if (std::find(h.names.begin(), h.names.end(), typed) != h.names.end()) {
      return std::string(h.text) + " (docs/slurm.md)";
    }
  }
  return "";
}

}  // namespace

std::string CommandPath(const CLI::App& cmd) {
  if (cmd.get_parent() == nullptr) return "gpupool";
  return CommandPath(*cmd.get_parent()) + " " + cmd.get_name();
}

std::string VersionText() { return std::string("gpupool ") + GPUPOOL_VERSION; }

std::string UsageFormatter::make_option_name(const CLI::Option* opt, bool is_positional) const {
  std::string name = CLI::Formatter::make_option_name(opt, is_positional);
  // `--init,--no-init{false}`: the {false} says what --no-init sets, not the default.
  for (size_t open; (open = name.find('{')) != std::string::npos;) {
    const size_t close = name.find('}', open);
    name.erase(open, close == std::string::npos ? std::string::npos : close - open + 1);
  }
  return name;
}

std::string UsageFormatter::make_option_opts(const CLI::Option* opt) const {
  if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
  std::ostringstream out;
  if (opt->get_type_size() != 0) {
    // CLI11's type name is "TYPE" or "TYPE:CHECK" ("INT:INT in [0 - 4095]", "TEXT:{off,warn}").
    // A name given with type_name ("SRC:DST[:ro]") is shown as it is.
    std::string type = opt->get_type_name();
    std::string check;
    const size_t colon = type.find(':');
    if (colon != std::string::npos) {
      const std::string base = type.substr(0, colon);
      if (base == "TEXT" || base == "INT" || base == "UINT" || base == "FLOAT") {
        check = type.substr(colon + 1);
        if (check.rfind(base + " ", 0) == 0) check.erase(0, base.size() + 1);
        type = base;
      }
    }
    std::string label;
    if (type == "TEXT") {
      const auto& l = opt->get_lnames();
      label = l.empty() ? std::string("VALUE") : Upper(l.front());
    } else if (type == "INT" || type == "UINT") {
      label = "N";
    } else if (type == "FLOAT") {
      label = "NUMBER";
    } else {
      label = type;  // a name the option was given (DURATION), or none for a flag
    }
    if (!check.empty()) label += label.empty() ? check : " " + check;
    // A positional's name says what it is; only a check is worth adding to it.
    if (!opt->nonpositional()) label = check;
    if (!label.empty()) out << " " << label;
    if (!opt->get_default_str().empty()) out << " (default " << opt->get_default_str() << ")";
    // A list taken in one go (a positional's words); one value per occurrence otherwise.
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size &&
        (!opt->nonpositional() || opt->get_allow_extra_args())) {
      out << " ...";
    }
    if (opt->get_required()) out << " " << get_label("REQUIRED");
  }
  if (!opt->get_envname().empty())
    out << " (" << get_label("Env") << ":" << opt->get_envname() << ")";
  return out.str();
}

void SetUpUsage(CLI::App& app) {
  app.formatter(std::make_shared<UsageFormatter>());
  app.set_version_flag("--version", VersionText(), "print gpupool's version and exit");
  CLI::App* version = app.add_subcommand("version", "Print gpupool's version (as --version)");
  version->callback([] { throw CLI::CallForVersion(VersionText(), 0); });
}

std::vector<std::string> Nearest(std::string_view typed,
                                 const std::vector<std::string>& candidates) {
  // Compared without their leading dashes: "--gpu" is one letter from "--gpus".
  auto bare = [](std::string_view s) {
    while (!s.empty() && s.front() == '-') s.remove_prefix(1);
    return s;
  };
  const std::string_view t = bare(typed);
  if (t.empty()) return {};
  const size_t limit = std::max<size_t>(1, (t.size() + 1) / 3);
  std::vector<std::pair<size_t, std::string>> near;
  for (const std::string& c : candidates) {
    const std::string_view b = bare(c);
    if (b.empty() || c == typed) continue;
    // Scored in half steps: a typo of d edits scores 2d; the start of a longer name
    // ("--after" for --after-ok) scores 3, after a one-letter typo ("--gpu": --gpus
    // before --gpu-share).
    const size_t d = EditDistance(t, b);
    size_t score = d <= limit ? 2 * d : SIZE_MAX;
    if (t.size() >= 3 && b.substr(0, t.size()) == t) score = std::min<size_t>(score, 3);
    // One-letter options are near only when they differ in case ("-j" for -J).
    if (b.size() == 1 && t.size() == 1 && std::tolower(b[0]) != std::tolower(t[0])) continue;
    if (score != SIZE_MAX) near.emplace_back(score, c);
  }
  std::stable_sort(near.begin(), near.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [d, c] : near) {
    if (out.size() == 3 || d > near.front().first) break;
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

std::string ExplainUnknown(const CLI::App& cmd, const std::string& word,
                           std::string_view path_given) {
  const std::string path = path_given.empty() ? CommandPath(cmd) : std::string(path_given);
  if (word.size() > 1 && word[0] == '-' && word != "--") {
    const std::string typed = word.substr(0, word.find('='));  // --gpu=1
    if (const std::string hint = SlurmHint(path, typed); !hint.empty()) {
      return "unknown option '" + typed + "' of `" + path + "`: " + hint;
    }
    std::vector<std::string> names;
    for (const CLI::Option* o : cmd.get_options()) {
      if (o->get_group().empty()) continue;  // hidden
      for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
      for (const std::string& s : o->get_snames()) names.push_back("-" + s);
    }
    const std::vector<std::string> near = Nearest(typed, names);
    std::string msg = "unknown option '" + typed + "' of `" + path + "`";
    if (!near.empty()) msg += "; did you mean " + JoinOr(near) + "?";
    return msg + " (`" + path + " --help` lists its options)";
  }
  const std::vector<const CLI::App*> subs =
      cmd.get_subcommands([](const CLI::App* a) { return !Hidden(a); });
  if (subs.empty() || word.empty() || word[0] == '-') return "";
  std::vector<std::string> names;
  for (const CLI::App* s : subs) names.push_back(s->get_name());
  const std::vector<std::string> near = Nearest(word, names);
  std::string msg =
      "unknown command '" + word + "'" + (cmd.get_parent() == nullptr ? "" : " of `" + path + "`");
  if (!near.empty()) msg += "; did you mean " + JoinOr(near) + "?";
  return msg + " (`" + path + " --help` lists the commands)";
}

int ReportParseError(CLI::App& app, const CLI::ParseError& e, std::ostream& out,
                     std::ostream& err) {
  if (e.get_exit_code() != 0) {
    // The innermost command that was reached, and what it was given but does not know.
    CLI::App* cmd = &app;
    while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().back();
    for (const std::string& word : cmd->remaining()) {
      const std::string why = ExplainUnknown(*cmd, word);
      if (!why.empty()) {
        err << "gpupool: " << why << "\n" << std::flush;
        return 2;
      }
    }
  }
  return app.exit(e, out, err) == 0 ? 0 : 2;
}

}  // namespace gpupool::cli
