// The command line's own words: help with value names and honest flag pairs, --version,
// and "did you mean", on the real client commands.
#include "cli/usage.h"

#include <gtest/gtest.h>

#include <sstream>

#include "cli/client/client_commands.h"

namespace gpupool::cli {
namespace {

struct Parsed {
  int code = -1;
  std::string out;
  std::string err;
};

// `gpupool ARGS...` as main() sets it up and reports its parse errors, with the client
// commands (none of these reach a server).
class UsageTest : public ::testing::Test {
 protected:
  Parsed Run(std::vector<std::string> args) {
    CLI::App app{"gpupool"};
    app.require_subcommand(1);
    SetUpUsage(app);
    CommandContext ctx;
    std::ostringstream out, err;
    ClientEnvironment env;
    env.out = &out;
    env.err = &err;
    env.getenv = [](const std::string&) { return std::string(); };
    env.now_us = [] { return int64_t{0}; };
    env.cwd = [] { return std::string("/"); };
    RegisterClientCommands(app, ctx, env);
    Parsed p;
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
      app.parse(reversed);
      p.code = ctx.exit_code;
    } catch (const CLI::ParseError& e) {
      p.code = ReportParseError(app, e, out, err);
    }
    p.out = out.str();
    p.err = err.str();
    return p;
  }
};

TEST(NearestTest, TyposAndStartsOfNamesButNothingFar) {
  const std::vector<std::string> commands = {"submit", "queue", "show", "cancel", "logs", "hold"};
  EXPECT_EQ(Nearest("sumbit", commands), std::vector<std::string>{"submit"});  // a swap is one
  EXPECT_EQ(Nearest("qeue", commands), std::vector<std::string>{"queue"});
  EXPECT_EQ(Nearest("cancle", commands), std::vector<std::string>{"cancel"});
  EXPECT_TRUE(Nearest("frobnicate", commands).empty());
  EXPECT_TRUE(Nearest("", commands).empty());
  const std::vector<std::string> options = {"--gpus",      "--gpu-share", "--after-ok",
                                            "--after-any", "-J",          "-t"};
  EXPECT_EQ(Nearest("--gpu", options), std::vector<std::string>{"--gpus"});
  EXPECT_EQ(Nearest("--after", options), (std::vector<std::string>{"--after-ok", "--after-any"}));
  EXPECT_EQ(Nearest("-j", options), std::vector<std::string>{"-J"});
  EXPECT_TRUE(Nearest("-x", options).empty());
}

TEST_F(UsageTest, VersionFlagAndCommandPrintTheBuildsVersion) {
  const std::string want = std::string("gpupool ") + GPUPOOL_VERSION + "\n";
  for (const auto& args : {std::vector<std::string>{"--version"}, {"version"}}) {
    Parsed p = Run(args);
    EXPECT_EQ(p.code, 0) << args[0];
    EXPECT_EQ(p.out, want) << args[0];
    EXPECT_EQ(p.err, "");
  }
  EXPECT_EQ(VersionText(), want.substr(0, want.size() - 1));
}

TEST_F(UsageTest, AnUnknownCommandOrOptionSaysWhatWasTypedAndWhatIsNear) {
  Parsed p = Run({"sumbit", "--", "true"});
  EXPECT_EQ(p.code, 2);
  EXPECT_EQ(p.err,
            "gpupool: unknown command 'sumbit'; did you mean submit? (`gpupool --help` lists "
            "the commands)\n");
  p = Run({"submit", "--gpu", "1", "--", "true"});
  EXPECT_EQ(p.code, 2);
  EXPECT_EQ(p.err,
            "gpupool: unknown option '--gpu' of `gpupool submit`; did you mean --gpus? "
            "(`gpupool submit --help` lists its options)\n");
  p = Run({"queue", "--stat=RUNNING"});
  EXPECT_EQ(p.err,
            "gpupool: unknown option '--stat' of `gpupool queue`; did you mean --state or --start? "
            "(`gpupool queue --help` lists its options)\n");
  p = Run({"token", "craete"});
  EXPECT_EQ(p.err,
            "gpupool: unknown command 'craete' of `gpupool token`; did you mean create? "
            "(`gpupool token --help` lists the commands)\n");
  // Nothing near: no guess, still what was typed and where the list is.
  p = Run({"submit", "--frobnicate", "--", "true"});
  EXPECT_EQ(p.code, 2);
  EXPECT_EQ(p.err,
            "gpupool: unknown option '--frobnicate' of `gpupool submit` (`gpupool submit --help` "
            "lists its options)\n");
  // Other usage errors are CLI11's own.
  p = Run({"submit", "--gpus"});
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("--gpus"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("did you mean"), std::string::npos) << p.err;
}

// docs/slurm.md: sbatch's -A and -C were "did you mean -a / -c?", options of another
// meaning (an array, CPUs); Slurm's options without a twin here name what to use.
TEST_F(UsageTest, SlurmsOwnOptionsNameWhatToUseNotANearLetter) {
  Parsed p = Run({"submit", "-A", "vision", "--", "true"});
  EXPECT_EQ(p.code, 2);
  EXPECT_EQ(p.err,
            "gpupool: unknown option '-A' of `gpupool submit`: Slurm's account is --project "
            "PROJECT here (docs/slurm.md)\n");
  p = Run({"run", "-C", "a100", "--", "true"});
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("--gpu-model"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("did you mean"), std::string::npos) << p.err;
  p = Run({"alloc", "--gres=gpu:2"});
  EXPECT_NE(p.err.find("--gres=gpu:N is --gpus N here"), std::string::npos) << p.err;
  EXPECT_EQ(ExplainUnknown(CLI::App("script lines"), "-A", "gpupool submit"),
            "unknown option '-A' of `gpupool submit`: Slurm's account is --project PROJECT here "
            "(docs/slurm.md)");  // a script's #GPUPOOL lines, as submit_flags.cc asks
  // Other commands keep "did you mean": queue's -A is no account.
  p = Run({"queue", "-A"});
  EXPECT_NE(p.err.find("did you mean -a?"), std::string::npos) << p.err;
}

TEST_F(UsageTest, HelpNamesValuesAndShowsFlagPairsWithoutAFalseDefault) {
  Parsed p = Run({"submit", "--help"});
  EXPECT_EQ(p.code, 0);
  const std::string& h = p.out;
  EXPECT_EQ(h.find("TEXT"), std::string::npos) << h;
  EXPECT_EQ(h.find("{false}"), std::string::npos) << h;
  for (const char* shown :
       {"-t,--time DURATION", "-J,--name,--job-name NAME", "-G,--gpus,--gpus-per-task N",
        "--mem SIZE", "--init,--no-init ", "(default: on)", "-H,--hold ",
        "-d,--dependency TYPE:ID[:ID][,TYPE:ID]", "--after-ok ID ",
        "--env NAME=VALUE|NAME:VERSION\n", "--server SERVER", "-p,--partition PARTITION"}) {
    EXPECT_NE(h.find(shown), std::string::npos) << shown << "\n" << h;
  }
  // An option taking one value per use is not shown as taking a list.
  EXPECT_EQ(h.find("--env NAME=VALUE|NAME:VERSION ..."), std::string::npos) << h;
  EXPECT_NE(h.find("command ..."), std::string::npos) << h;  // the positional's words
  p = Run({"logs", "--help"});
  EXPECT_NE(p.out.find("--task N in [0 - 4095]"), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("TEXT"), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("INT"), std::string::npos) << p.out;
}

}  // namespace
}  // namespace gpupool::cli
