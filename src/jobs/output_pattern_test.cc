#include "jobs/output_pattern.h"

#include <gtest/gtest.h>

#include "jobs/job.h"

namespace gpupool::jobs {
namespace {

OutputFields Fields() {
  OutputFields f;
  f.job_id = 42;
  f.name = "train";
  f.user = "alice";
  f.node = "gpu-3";
  f.task = 2;
  return f;
}

TEST(OutputPatternTest, ExpandsEveryLetterAsSlurm) {
  EXPECT_EQ(*ExpandOutputPattern("out-%j.%t.%x.%u.%N.log", Fields()),
            "out-42.2.train.alice.gpu-3.log");
  EXPECT_EQ(*ExpandOutputPattern("100%%-%j", Fields()), "100%-42");
  // No array: %A is the job, %a is 0.
  EXPECT_EQ(*ExpandOutputPattern("%A_%a", Fields()), "42_0");
  OutputFields element = Fields();
  element.job_id = 57;
  element.array_id = 40;
  element.array_index = 7;
  EXPECT_EQ(*ExpandOutputPattern("gpupool-%A_%a.out", element), "gpupool-40_7.out");
  EXPECT_EQ(*ExpandOutputPattern("%j", element), "57");
  EXPECT_EQ(*ExpandOutputPattern("r%4a-%3t", element), "r0007-002");
}

TEST(OutputPatternTest, NamesStayOneComponent) {
  OutputFields f = Fields();
  f.name = "../../etc/x";
  EXPECT_EQ(*ExpandOutputPattern("%x.out", f), ".._.._etc_x.out");
  f.name.clear();
  EXPECT_EQ(*ExpandOutputPattern("%x.out", f), "job.out");
}

TEST(OutputPatternTest, ErrorsNameTheFieldAndTheLetters) {
  Status s = CheckOutputPattern("--output", "out-%q");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--output 'out-%q'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("%j (job id)"), std::string::npos) << s.message();
  EXPECT_FALSE(CheckOutputPattern("--error", "trailing%").ok());
  EXPECT_FALSE(CheckOutputPattern("--output", "").ok());
  EXPECT_NE(CheckOutputPattern("--output", "dir/").message().find("names a directory"),
            std::string::npos);
  EXPECT_FALSE(CheckOutputPattern("--output", std::string(5000, 'a')).ok());
  EXPECT_FALSE(CheckOutputPattern("--output", "%123j").ok());
  EXPECT_TRUE(CheckOutputPattern("--output", "/abs/%j-%%.out").ok());
}

TEST(OutputPatternTest, PathIsRelativeToTheWorkdir) {
  EXPECT_EQ(*OutputPath("gpupool-%j.out", Fields(), "/home/a/w"), "/home/a/w/gpupool-42.out");
  EXPECT_EQ(*OutputPath("/tmp/o-%j", Fields(), "/home/a/w"), "/tmp/o-42");
  EXPECT_EQ(*OutputPath("../o", Fields(), "/home/a/w"), "/home/a/o");
}

TEST(OutputPatternTest, TaskLetterFound) {
  EXPECT_TRUE(PatternNamesTask("o.%t"));
  EXPECT_TRUE(PatternNamesTask("o.%2t"));
  EXPECT_FALSE(PatternNamesTask("o.%%t"));
  EXPECT_FALSE(PatternNamesTask("o.%j"));
}

TEST(OutputPatternTest, ValidateBatchIoNamesTheField) {
  Job job;
  job.command = std::vector<std::string>{"/x/run.sh"};
  job.output = "o-%j";
  job.request.tasks = 2;
  Status s = ValidateBatchIo(job);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("output 'o-%j'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("%t"), std::string::npos);
  job.output = "/dev/null";  // every task's output thrown away: no %t needed
  EXPECT_TRUE(ValidateBatchIo(job).ok());
  job.output = "o-%j";
  job.mpi = true;  // task 0 alone runs the command
  EXPECT_TRUE(ValidateBatchIo(job).ok());
  job.interactive = "run";
  job.mpi = false;
  job.request.tasks = 1;
  EXPECT_NE(ValidateBatchIo(job).message().find("output: gpupool run"), std::string::npos);
  Job scripted;
  scripted.command = std::vector<std::string>{"/x/run.sh"};
  scripted.script = std::string("#!/bin/sh\necho hi\n");
  EXPECT_TRUE(ValidateBatchIo(scripted).ok());
  scripted.script = std::string("a\0b", 3);
  EXPECT_NE(ValidateBatchIo(scripted).message().find("script: contains a NUL"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::jobs
