// How the gpupool command line speaks about itself: help that names values (`--time
// DURATION`) and shows `--init,--no-init` without CLI11's `{false}`, `--version`, and
// "did you mean" for an unknown command or option.
//
// Used by main.cc on the whole app and by the client's #GPUPOOL script lines; depends on
// CLI11 only.
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool::cli {

// "gpupool 0.1.0": the version this build knows (CMake's project version).
std::string VersionText();

// `gpupool submit`, `gpupool token create`: the command as typed.
std::string CommandPath(const CLI::App& cmd);

// Help as gpupool prints it. An option's value is named by its type_name when one was
// set (`--time DURATION`), else by its long name in capitals (`--user USER`), never
// CLI11's TEXT; a flag pair reads `--init,--no-init` (CLI11 would print
// `--init,--no-init{false}`, which reads as "off by default"); a repeatable option that
// takes one value per occurrence is not shown as taking a list.
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
};

// Installs UsageFormatter on `app` (subcommands added later inherit it), `--version` on
// the app, and a `version` subcommand, both printing VersionText().
void SetUpUsage(CLI::App& app);

// The candidates nearest to `typed` by edit distance (a swap of two neighbours counts
// one), at most 3, best first; none when nothing is near enough to be a typo.
std::vector<std::string> Nearest(std::string_view typed,
                                 const std::vector<std::string>& candidates);

// "unknown option '--gpu' of `gpupool submit`; did you mean --gpus?" for an argument
// the command `cmd` does not know (an option when it starts with '-', else a command),
// or "" when `word` is neither an option nor a command word. `path` names the command
// ("gpupool submit"); by default it is the chain of `cmd`'s parents.
std::string ExplainUnknown(const CLI::App& cmd, const std::string& word,
                           std::string_view path = {});

// What main() does with a CLI11 parse error of `app`: help and --version to `out` (exit
// 0); an unknown command or option to `err` as ExplainUnknown says it; anything else as
// CLI11 says it. Returns the exit status (0, or 2 for a usage error).
int ReportParseError(CLI::App& app, const CLI::ParseError& e, std::ostream& out, std::ostream& err);

}  // namespace gpupool::cli
