// Manual pages from the command line's own definition: one roff page per command, as git
// and podman ship them (gpupool(1), gpupool-submit(1), gpupool-sim-timed(1), ...), with
// the same descriptions, value names and defaults `--help` prints, so the pages cannot
// drift from the options. `make deb` installs them (packaging/deb/build-deb.sh).
//
// Depends on CLI11 and usage.h (the help formatter that names values).
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <string_view>

namespace gpupool::cli {

// Text made safe for roff: backslashes escaped, hyphens as \- (so options copy and search
// as typed), and a line that would start with '.' or '\'' (a roff request) guarded.
std::string RoffEscape(std::string_view text);

// The page of `cmd` ("gpupool-submit" for `gpupool submit`): NAME (the description up to
// its first ':' or ';'), SYNOPSIS, DESCRIPTION (the whole description and footer),
// ARGUMENTS, OPTIONS (as `--help` names them), COMMANDS (its visible subcommands, each
// with its page) and SEE ALSO. `date` is the page's date, `version` e.g. "gpupool 0.1.0".
std::string ManPage(const CLI::App& cmd, std::string_view version, std::string_view date);

// Every page: `root`'s and those of all its visible subcommands at any depth, by file
// name ("gpupool.1", "gpupool-submit.1", "gpupool-sim-timed.1"). Hidden commands (no
// group) have none.
std::map<std::string, std::string> ManPages(const CLI::App& root, std::string_view version,
                                            std::string_view date);

// The hidden `gpupool man-pages --out DIR [--date YYYY-MM-DD]` command: writes ManPages of
// `app` (the whole command line, so register it last) into DIR.
void RegisterManPagesCommand(CLI::App& app, int* exit_code);

}  // namespace gpupool::cli
