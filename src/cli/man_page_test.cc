#include "cli/man_page.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "cli/usage.h"

namespace gpupool::cli {
namespace {

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ManPageTest, RoffEscapeGuardsRequestsBackslashesAndHyphens) {
  EXPECT_EQ(RoffEscape("--gpus N"), "\\-\\-gpus N");
  EXPECT_EQ(RoffEscape("a\\b"), "a\\eb");
  EXPECT_EQ(RoffEscape(".TH x\n'so y\nz.w"), "\\&.TH x\n\\&'so y\nz.w");
}

// A small command line as main.cc builds gpupool's: a page per visible command at any
// depth, named by its path; hidden ones (no group) have none; options as --help names
// them (value names and defaults), descriptions whole.
TEST(ManPageTest, EveryVisibleCommandHasAPageWithItsOptions) {
  CLI::App app{"gpupool: one shared, fair, well-used GPU pool"};
  SetUpUsage(app);
  std::string level = "warn";
  app.add_option("--log-level", level, "trace, debug or off")->capture_default_str();
  CLI::App* submit = app.add_subcommand(
      "submit", "Submit a job: gpupool submit [options] SCRIPT; a SCRIPT's '#GPUPOOL' lines");
  int gpus = 0;
  std::string time;
  std::vector<std::string> command;
  submit->add_option("-G,--gpus", gpus, "whole GPUs per task")->capture_default_str();
  submit->add_option("-t,--time", time, ".5 hours or \\d")->type_name("DURATION");
  submit->add_option("command", command, "SCRIPT [ARGS...]");
  submit->footer("The job runs as you.");
  CLI::App* sim = app.add_subcommand("sim", "trace-driven simulator");
  CLI::App* timed = sim->add_subcommand("timed", "time-driven replay of a trace");
  bool json = false;
  timed->add_flag("--json", json, "print JSON");
  app.add_subcommand("secret", "a build step")->group("");

  const auto pages = ManPages(app, "gpupool 9.9", "2026-11-28");
  std::vector<std::string> names;
  for (const auto& [name, text] : pages) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"gpupool-sim-timed.1", "gpupool-sim.1", "gpupool-submit.1",
                                      "gpupool-version.1", "gpupool.1"}));

  const std::string& top = pages.at("gpupool.1");
  EXPECT_TRUE(Has(top, ".TH \"GPUPOOL\" 1 \"2026-11-28\" \"gpupool 9.9\" \"gpupool manual\"\n"))
      << top;
  EXPECT_TRUE(Has(top, ".SH NAME\ngpupool \\- one shared, fair, well\\-used GPU pool\n")) << top;
  EXPECT_TRUE(Has(top, "\\fB\\-\\-log\\-level\\fR LOG_LEVEL (default warn)\ntrace, debug or off"))
      << top;
  EXPECT_TRUE(Has(top, "\\fBgpupool submit\\fR\nSubmit a job; see \\fBgpupool\\-submit\\fR(1).\n"))
      << top;
  EXPECT_FALSE(Has(top, "secret"));

  const std::string& sub = pages.at("gpupool-submit.1");
  EXPECT_TRUE(Has(sub, ".TH \"GPUPOOL-SUBMIT\" 1 ")) << sub;
  EXPECT_TRUE(Has(sub, ".SH NAME\ngpupool\\-submit \\- Submit a job\n")) << sub;
  EXPECT_TRUE(Has(sub, ".SH SYNOPSIS\n.B gpupool submit\n[OPTIONS] [command...]\n")) << sub;
  EXPECT_TRUE(Has(sub, "SCRIPT; a SCRIPT's '#GPUPOOL' lines\n.PP\nThe job runs as you.\n")) << sub;
  EXPECT_TRUE(Has(sub, ".SH ARGUMENTS\n.TP\n\\fBcommand\\fR\nSCRIPT [ARGS...]\n")) << sub;
  EXPECT_TRUE(Has(sub, "\\fB\\-G,\\-\\-gpus\\fR N (default 0)\nwhole GPUs per task\n")) << sub;
  // A description that starts with '.' is no roff request; a backslash stays one.
  EXPECT_TRUE(Has(sub, "\\fB\\-t,\\-\\-time\\fR DURATION\n\\&.5 hours or \\ed\n")) << sub;
  EXPECT_TRUE(Has(sub, ".SH SEE ALSO\n\\fBgpupool\\fR(1); ")) << sub;

  const std::string& deep = pages.at("gpupool-sim-timed.1");
  EXPECT_TRUE(Has(deep, ".SH SYNOPSIS\n.B gpupool sim timed\n")) << deep;
  EXPECT_TRUE(Has(deep, "\\fBgpupool\\-sim\\fR(1), \\fBgpupool\\fR(1)")) << deep;
  EXPECT_TRUE(Has(deep, "\\fB\\-\\-json\\fR\nprint JSON\n")) << deep;
  EXPECT_TRUE(Has(pages.at("gpupool-sim.1"), ".SH COMMANDS\n.TP\n\\fBgpupool sim timed\\fR\n"));
}

// A SOURCE_DATE_EPOCH that is no date (gmtime_r fails past year 2^31; a year of ten
// characters overflows the page's date buffer) is an error, not an unset buffer read.
TEST(ManPageTest, SourceDateEpochOutOfRangeIsAnError) {
  for (const char* epoch : {"99999999999999999", "-9999999999999999"}) {
    CLI::App app{"gpupool"};
    int exit_code = 0;
    RegisterManPagesCommand(app, &exit_code);
    ::setenv("SOURCE_DATE_EPOCH", epoch, 1);
    app.parse("man-pages --out " + ::testing::TempDir() + "man-pages-epoch", false);
    ::unsetenv("SOURCE_DATE_EPOCH");
    EXPECT_EQ(exit_code, 1) << epoch;
  }
}

}  // namespace
}  // namespace gpupool::cli
