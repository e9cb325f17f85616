#include "cli/man_page.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>

#include "cli/usage.h"

namespace gpupool::cli {
namespace {

bool Visible(const CLI::App* a) { return !a->get_name().empty() && !a->get_group().empty(); }

// "gpupool-sim-timed": the page's name.
std::string PageName(const CLI::App& cmd) {
  std::string name = CommandPath(cmd);
  for (char& c : name) {
    if (c == ' ') c = '-';
  }
  return name;
}

std::string UpperCase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The NAME line's words: the description up to its first ": " or "; " (the rest, a usage
// line or a note, is in DESCRIPTION), without a final period; a description that starts
// with the command's own name and a colon, from after it.
std::string Summary(const CLI::App& cmd) {
  std::string d = cmd.get_description();
  // "gpupool: one shared, ...": the words after the command's own name.
  if (const std::string own = CommandPath(cmd) + ": "; d.starts_with(own)) d.erase(0, own.size());
  if (d.empty()) d = CommandPath(cmd);
  for (std::string_view stop : {": ", "; "}) {
    if (size_t at = d.find(stop); at != std::string::npos) d.erase(at);
  }
  while (!d.empty() && (d.back() == '.' || d.back() == ' ')) d.pop_back();
  return d;
}

std::vector<const CLI::App*> Subcommands(const CLI::App& cmd) {
  return cmd.get_subcommands([](const CLI::App* a) { return Visible(a); });
}

// "[OPTIONS] [command...]" as the help's usage line gives it, after the command's path.
std::string UsageTail(const CLI::App& cmd, const UsageFormatter& f) {
  std::string usage = f.make_usage(&cmd, "NAME");
  if (size_t at = usage.find("NAME"); at != std::string::npos) usage.erase(0, at + 4);
  while (!usage.empty() && (usage.back() == '\n' || usage.back() == ' ')) usage.pop_back();
  while (!usage.empty() && usage.front() == ' ') usage.erase(0, 1);
  return usage;
}

void OptionList(const std::vector<const CLI::Option*>& opts, bool positional,
                const UsageFormatter& f, std::string* out) {
  for (const CLI::Option* o : opts) {
    std::string name = f.make_option_name(o, positional);
    std::string rest = positional ? std::string() : f.make_option_opts(o);
    while (!rest.empty() && rest.front() == ' ') rest.erase(0, 1);
    *out += ".TP\n\\fB" + RoffEscape(name) + "\\fR";
    if (!rest.empty()) *out += " " + RoffEscape(rest);
    *out += "\n" +
            RoffEscape(o->get_description().empty() ? "(no description)" : o->get_description()) +
            "\n";
  }
}

}  // namespace

std::string RoffEscape(std::string_view text) {
  std::string out;
  bool line_start = true;
  for (char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    line_start = c == '\n';
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  return out;
}

std::string ManPage(const CLI::App& cmd, std::string_view version, std::string_view date) {
  const UsageFormatter f;
  const std::string page = PageName(cmd);
  const std::string path = CommandPath(cmd);
  std::string out = ".\\\" Made by `gpupool man-pages` from the command line's own definition.\n";
  out += ".TH \"" + UpperCase(page) + "\" 1 \"" + std::string(date) + "\" \"" +
         std::string(version) + "\" \"gpupool manual\"\n";
  out += ".SH NAME\n" + RoffEscape(page) + " \\- " + RoffEscape(Summary(cmd)) + "\n";
  out += ".SH SYNOPSIS\n.B " + RoffEscape(path) + "\n" + RoffEscape(UsageTail(cmd, f)) + "\n";
  out += ".SH DESCRIPTION\n";
  out += RoffEscape(cmd.get_description().empty() ? Summary(cmd) : cmd.get_description()) + "\n";
  if (!cmd.get_footer().empty()) out += ".PP\n" + RoffEscape(cmd.get_footer()) + "\n";
  const auto positionals = cmd.get_options(
      [](const CLI::Option* o) { return !o->nonpositional() && !o->get_group().empty(); });
  if (!positionals.empty()) {
    out += ".SH ARGUMENTS\n";
    OptionList(positionals, true, f, &out);
  }
  const auto options = cmd.get_options(
      [](const CLI::Option* o) { return o->nonpositional() && !o->get_group().empty(); });
  if (!options.empty()) {
    out += ".SH OPTIONS\n";
    OptionList(options, false, f, &out);
  }
  const auto subs = Subcommands(cmd);
  if (!subs.empty()) {
    out += ".SH COMMANDS\n";
    for (const CLI::App* s : subs) {
      out += ".TP\n\\fB" + RoffEscape(CommandPath(*s)) + "\\fR\n" + RoffEscape(Summary(*s)) +
             "; see \\fB" + RoffEscape(PageName(*s)) + "\\fR(1).\n";
    }
  }
  out += ".SH SEE ALSO\n";
  std::string see;
  for (const CLI::App* p = cmd.get_parent(); p != nullptr; p = p->get_parent()) {
    see += (see.empty() ? "" : ", ") + std::string("\\fB") + RoffEscape(PageName(*p)) + "\\fR(1)";
  }
  out += see + (see.empty() ? "" : "; ") +
         "the guides in /usr/share/doc/gpupool (cli.md for every command, deploy.md, api.md, "
         "security.md); in the source tree, docs/.\n";
  return out;
}

std::map<std::string, std::string> ManPages(const CLI::App& root, std::string_view version,
                                            std::string_view date) {
  std::map<std::string, std::string> pages;
  std::vector<const CLI::App*> todo = {&root};
  while (!todo.empty()) {
    const CLI::App* cmd = todo.back();
    todo.pop_back();
    pages[PageName(*cmd) + ".1"] = ManPage(*cmd, version, date);
    for (const CLI::App* s : Subcommands(*cmd)) todo.push_back(s);
  }
  return pages;
}

void RegisterManPagesCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("man-pages", "write gpupool's manual pages (make deb)");
  cmd->group("");  // hidden: a build step, not a user's command
  auto out_dir = std::make_shared<std::string>();
  auto date = std::make_shared<std::string>();
  cmd->add_option("--out", *out_dir, "directory to write the pages into")->required();
  cmd->add_option("--date", *date, "the pages' date, YYYY-MM-DD (default: today, UTC)")
      ->check([](const std::string& v) -> std::string {
        const bool ok = v.size() == 10 && v[4] == '-' && v[7] == '-' &&
                        std::all_of(v.begin(), v.end(), [](char c) {
                          return c == '-' || std::isdigit(static_cast<unsigned char>(c));
                        });
        return ok ? "" : "--date '" + v + "' is no date: write YYYY-MM-DD, e.g. 2026-11-28";
      });
  cmd->callback([&app, out_dir, date, exit_code] {
    if (date->empty()) {
      // SOURCE_DATE_EPOCH: reproducible pages in a package build.
      std::time_t t = std::time(nullptr);
      if (const char* e = std::getenv("SOURCE_DATE_EPOCH"); e != nullptr && *e != '\0') {
        t = static_cast<std::time_t>(std::strtoll(e, nullptr, 10));
      }
      char buf[16];
      std::tm tm{};
      // Only a SOURCE_DATE_EPOCH far out of range fails either (buf is then unset).
      if (::gmtime_r(&t, &tm) == nullptr || std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm) == 0) {
        std::cerr << "gpupool man-pages: SOURCE_DATE_EPOCH is no date (seconds since 1970, "
                     "UTC): fix it, or pass --date YYYY-MM-DD\n";
        *exit_code = 1;
        return;
      }
      *date = buf;
    }
    if (::mkdir(out_dir->c_str(), 0755) != 0 && errno != EEXIST) {
      std::cerr << "gpupool man-pages: cannot make --out " << *out_dir << ": "
                << std::strerror(errno) << "\n";
      *exit_code = 1;
      return;
    }
    for (const auto& [file, text] : ManPages(app, VersionText(), *date)) {
      std::ofstream f(*out_dir + "/" + file, std::ios::binary | std::ios::trunc);
      f << text;
      if (!f.flush()) {
        std::cerr << "gpupool man-pages: cannot write " << *out_dir << "/" << file << "\n";
        *exit_code = 1;
        return;
      }
    }
  });
}

}  // namespace gpupool::cli
