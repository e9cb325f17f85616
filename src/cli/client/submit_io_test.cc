#include "cli/client/submit_io.h"

#include <gtest/gtest.h>

namespace gpupool::cli {
namespace {

using Vars = std::vector<std::pair<std::string, std::string>>;

Vars Exported(const std::string& spec, const std::vector<std::string>& environ) {
  Result<ExportSpec> parsed = ParseExport(spec);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  Result<Vars> vars = ExportedVariables(*parsed, environ);
  EXPECT_TRUE(vars.ok()) << vars.status().message();
  return vars.ok() ? *vars : Vars{};
}

const std::vector<std::string> kShell = {"PATH=/home/a/venv/bin:/usr/bin",
                                         "HOME=/home/a",
                                         "VIRTUAL_ENV=/home/a/venv",
                                         "GPUPOOL_TOKEN=secret",
                                         "GPUPOOL_SERVER=h:1",
                                         "CUDA_VISIBLE_DEVICES=3",
                                         "LD_PRELOAD=/x.so",
                                         "PWD=/home/a",
                                         "MASTER_PORT=1",
                                         "CUDA_MPS_PIPE_DIRECTORY=/p",
                                         "EDITOR=vi"};

TEST(SubmitIoTest, AllExportsTheShellLessTheDenyList) {
  const Vars vars = Exported("ALL", kShell);
  EXPECT_EQ(vars, (Vars{{"EDITOR", "vi"},
                        {"HOME", "/home/a"},
                        {"PATH", "/home/a/venv/bin:/usr/bin"},
                        {"VIRTUAL_ENV", "/home/a/venv"}}));
}

TEST(SubmitIoTest, NoneExportsNothing) { EXPECT_TRUE(Exported("NONE", kShell).empty()); }

TEST(SubmitIoTest, AListExportsOnlyThoseAsSlurm) {
  EXPECT_EQ(Exported("PATH,FOO=bar,UNSET", kShell),
            (Vars{{"FOO", "bar"}, {"PATH", "/home/a/venv/bin:/usr/bin"}}));
  // Named explicitly, LD_PRELOAD passes; ALL first adds to everything, the value given wins.
  EXPECT_EQ(Exported("LD_PRELOAD", kShell), (Vars{{"LD_PRELOAD", "/x.so"}}));
  const Vars all = Exported("all,EDITOR=nano", kShell);
  EXPECT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0], (std::pair<std::string, std::string>{"EDITOR", "nano"}));
}

TEST(SubmitIoTest, ErrorsNameExportAndThePart) {
  for (const auto& [spec, want] : std::vector<std::pair<std::string, std::string>>{
           {"NONE,PATH", "--export NONE,PATH: NONE comes alone"},
           {"A=1,2", "'2' is not NAME or NAME=VALUE"},
           {"GPUPOOL_TOKEN", "GPUPOOL_TOKEN is set by gpupool"},
           {"PATH,ALL", "ALL comes alone"},
           {"", "--export '': give ALL, NONE"}}) {
    Result<ExportSpec> r = ParseExport(spec);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
}

TEST(SubmitIoTest, TooLargeAnEnvironmentIsRefusedNamingTheLargest) {
  std::vector<std::string> env = kShell;
  env.push_back("HUGE=" + std::string(kMaxExportBytes, 'x'));
  Result<Vars> r = ExportedVariables(*ParseExport("ALL"), env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--export"), std::string::npos);
  EXPECT_NE(r.status().message().find("HUGE ("), std::string::npos) << r.status().message();
  // Naming what it needs is the way out.
  EXPECT_TRUE(ExportedVariables(*ParseExport("PATH"), env).ok());
  std::vector<std::string> latin1 = {std::string("X=caf\xe9")};
  Result<Vars> bad = ExportedVariables(*ParseExport("ALL"), latin1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("value of X is not UTF-8"), std::string::npos);
}

TEST(SubmitIoTest, EnvFlagsWinAndContainersExportOnlyWhenAsked) {
  SubmitFlags f;
  OrderedJson body;
  body["env"] = {{"EDITOR", "emacs"}};
  ASSERT_TRUE(AddExport(f, kShell, &body).ok());
  EXPECT_EQ(body["env"]["EDITOR"], "emacs");
  EXPECT_EQ(body["env"]["HOME"], "/home/a");
  f.image = "docker.io/library/busybox";
  OrderedJson container;
  ASSERT_TRUE(AddExport(f, kShell, &container).ok());
  EXPECT_FALSE(container.contains("env"));
  f.export_env = "EDITOR";
  ASSERT_TRUE(AddExport(f, kShell, &container).ok());
  EXPECT_EQ(container["env"], OrderedJson({{"EDITOR", "vi"}}));
}

TEST(SubmitIoTest, OutputDefaultsAsSlurm) {
  bool writable = true;
  auto output = [&writable](SubmitFlags f, int tasks, bool mpi) {
    OrderedJson body;
    body["request"] = {{"tasks", tasks}};
    if (mpi) body["mpi"] = true;
    Status s = AddOutputFlags(f, writable, &body);
    return s.ok() ? body.value("output", std::string()) : s.message();
  };
  SubmitFlags f;
  EXPECT_EQ(output(f, 1, false), "gpupool-%j.out");
  EXPECT_EQ(output(f, 4, false), "gpupool-%j.%t.out");
  EXPECT_EQ(output(f, 4, true), "gpupool-%j.out");
  f.array = "0-9";
  EXPECT_EQ(output(f, 1, false), "gpupool-%A_%a.out");
  f.array.reset();
  f.output = "o.txt";
  EXPECT_NE(output(f, 2, false).find("--output o.txt: the job's 2 tasks would write one file"),
            std::string::npos);
  f.output = "/dev/null";  // every task's output thrown away: no %t needed
  EXPECT_EQ(output(f, 2, false), "/dev/null");
  f.output = "o-%y";
  EXPECT_NE(output(f, 1, false).find("--output 'o-%y'"), std::string::npos);
  // A directory the submitter cannot write gets no default (the run directory keeps the
  // output), but an explicit -o stands.
  writable = false;
  EXPECT_EQ(output(SubmitFlags{}, 1, false), "");
  f.output = "/tmp/o-%j";
  EXPECT_EQ(output(f, 1, false), "/tmp/o-%j");
}

TEST(SubmitIoTest, ScriptLinesTakeExportAndOutput) {
  Result<std::vector<Directive>> d = ReadScriptDirectives(
      "#!/bin/sh\n#GPUPOOL --export=PATH,EDITOR=vi\n#GPUPOOL -o out-%j.txt -e err-%j.txt\n",
      "s.sh");
  ASSERT_TRUE(d.ok()) << d.status().message();
  Result<SubmitFlags> f = ParseDirectives(*d, "s.sh");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->export_env, "PATH,EDITOR=vi");
  EXPECT_EQ(f->output, "out-%j.txt");
  EXPECT_EQ(f->error, "err-%j.txt");
  SubmitFlags cmdline;
  cmdline.export_env = "NONE";
  EXPECT_EQ(MergeFlags(*f, cmdline).export_env, "NONE");  // the command line wins
  EXPECT_EQ(MergeFlags(*f, cmdline).output, "out-%j.txt");
}

TEST(SubmitIoTest, ScriptBoundsAndTerminalVariables) {
  OrderedJson body;
  EXPECT_TRUE(AddScript("run.sh", "#!/bin/sh\necho hi\n", 18, &body).ok());
  EXPECT_EQ(body["script"], "#!/bin/sh\necho hi\n");
  EXPECT_NE(AddScript("bin",
                      std::string("\x7f"
                                  "ELF\0",
                                  5),
                      5, &body)
                .message()
                .find("not UTF-8"),
            std::string::npos);
  EXPECT_EQ(TerminalVariables({"TERM=xterm-256color", "LANG=C.UTF-8", "LC_ALL=C", "PATH=/x"}),
            (Vars{{"TERM", "xterm-256color"}, {"LANG", "C.UTF-8"}, {"LC_ALL", "C"}}));
}

// The client's bound is the server's, 1 MiB (it was 512 KiB here, 1 MiB in the server and
// docs/api.md), and the refusal says the file's real size (it said the read cap,
// "1048576 bytes", of a 2,100,020-byte script).
TEST(SubmitIoTest, AScriptsBoundIsTheServersAndItsRealSizeIsSaid) {
  EXPECT_EQ(kMaxScriptBytes, size_t{1} << 20);
  OrderedJson body;
  const std::string big = "#!/bin/sh\n" + std::string(600 * 1024, '#') + "\n";
  EXPECT_TRUE(AddScript("mid.sh", big, big.size(), &body).ok());
  const std::string head = "#!/bin/sh\n" + std::string(kMaxScriptBytes, '#');
  EXPECT_EQ(AddScript("big.sh", head.substr(0, kMaxScriptBytes + 1), 2'100'020, &body).message(),
            "script 'big.sh' is 2100020 bytes; a job keeps a copy of at most 1048576 (1 MiB): "
            "make it smaller (move data into files it reads), or run it in place with -- big.sh "
            "(later edits then change the job)");
}

// A script the kernel cannot run is refused at submit, as sbatch refuses it (it failed on
// its node after the queue wait): no #! line, or a byte-order mark before it.
TEST(SubmitIoTest, AScriptWithoutAShebangLineIsRefused) {
  OrderedJson body;
  EXPECT_EQ(AddScript("plain.sh", "echo hi\n", 8, &body).message(),
            "script 'plain.sh' has no #! line, so it cannot run as a program: make its first "
            "line name its interpreter, e.g. #!/bin/bash, or submit it as -- bash plain.sh");
  EXPECT_EQ(AddScript("bom.sh", "\xEF\xBB\xBF#!/bin/bash\necho hi\n", 23, &body).message(),
            "script 'bom.sh' starts with a byte-order mark (the bytes EF BB BF some Windows "
            "editors write) before its #! line, so it cannot run: remove it with sed -i "
            "'1s/^\\xEF\\xBB\\xBF//' bom.sh");
  EXPECT_EQ(AddScript("empty.sh", "", 0, &body).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(body.contains("script"));
}

TEST(SubmitIoTest, Utf8ChecksAndEscapes) {
  EXPECT_TRUE(IsUtf8("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsUtf8("caf\xe9"));
  EXPECT_FALSE(IsUtf8("trunc\xe2\x82"));
  EXPECT_FALSE(IsUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(IsUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_EQ(EscapeNonUtf8("caf\xe9.out"), "caf\\xe9.out");
  EXPECT_EQ(EscapeNonUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
}

// Text that is not UTF-8 anywhere in a submission is refused naming its option: DumpJson
// replaced the bytes with U+FFFD, so the job ran another command or wrote another file.
TEST(SubmitIoTest, NonUtf8TextIsRefusedNamingItsOption) {
  const std::string bad = "caf\xe9";
  auto refusal = [](const OrderedJson& body) {
    Status s = CheckSubmissionText(body);
    return s.ok() ? std::string("OK") : s.message();
  };
  OrderedJson good = {{"command", {"echo", "caf\xc3\xa9"}},
                      {"env", {{"A", "\xc3\xa9"}}},
                      {"workdir", "/tmp"},
                      {"request", {{"gpus", 1}}}};
  EXPECT_EQ(refusal(good), "OK");
  auto starts = [&](const OrderedJson& body, const std::string& prefix) {
    const std::string m = refusal(body);
    EXPECT_EQ(m.substr(0, prefix.size()), prefix) << m;
    EXPECT_NE(m.find("is not UTF-8 text"), std::string::npos) << m;
  };
  starts({{"command", {"echo", bad}}}, "the command's word 2 'caf\\xe9' ");
  starts({{"env", {{"FOO", bad}}}}, "--env FOO 'caf\\xe9' ");
  starts({{"workdir", "/tmp/w\xe9"}},
         "--workdir (by default the current directory) '/tmp/w\\xe9' ");
  starts({{"output", "o\xe9.out"}}, "--output 'o\\xe9.out' ");
  starts({{"error", "e\xe9.err"}}, "--error 'e\\xe9.err' ");
  starts({{"name", bad}}, "--job-name 'caf\\xe9' ");
  starts({{"project", bad}}, "--project 'caf\\xe9' ");
  starts({{"mounts", {{{"source", bad}}}}}, "--mount 'caf\\xe9' ");
}

}  // namespace
}  // namespace gpupool::cli
