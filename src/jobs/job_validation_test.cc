#include "jobs/job_validation.h"

#include <gtest/gtest.h>

namespace gpupool::jobs {
namespace {

TEST(ImageRefTest, AcceptsWhatPodmanAccepts) {
  for (const char* ref :
       {"ubuntu", "ubuntu:22.04", "docker.io/library/ubuntu:22.04",
        "localhost/gpupool-itest-cu124:1", "nvcr.io/nvidia/pytorch:24.05-py3",
        "registry.example.com:5000/team/img_a.b-c:v1.2",
        "quay.io/a/b/c@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "a__b", "a---b",
        "localhost:5000/img", "host:5000", "a.b-c.d/x/y:T_1.2-3", "Registry/img",
        "img@sha512+v2:0123456789abcdef0123456789abcdef"}) {
    EXPECT_TRUE(ValidateImageRef(ref).ok()) << ref << ": " << ValidateImageRef(ref).message();
  }
}

// Regression: `submit --image=--user=0:0` ran the container as root (a podman flag).
TEST(ImageRefTest, ImageFieldThatIsAPodmanFlagIsRefused) {
  for (const char* ref : {"--user=0:0", "--privileged", "-v/:/host", "-u0"}) {
    Status s = ValidateImageRef(ref);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << ref;
    EXPECT_NE(s.message().find("image"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("starts with '-'"), std::string::npos) << s.message();
  }
}

TEST(ImageRefTest, RefusesWhatIsNotAReference) {
  for (const char* ref : {"",
                          "Upper",
                          "a b",
                          "img:",
                          "img:tag with space",
                          "img\n",
                          "img@sha256:short",
                          "a/../b",
                          "a_",
                          "a..b",
                          "a___b",
                          "host:/img",
                          "host:x/img",
                          "img:tag:more",
                          "img@sha256",
                          "img@1sha:0123456789abcdef0123456789abcdef",
                          "-host.com/img",
                          "/abs/path",
                          "img:-tag",
                          "a//b"}) {
    EXPECT_FALSE(ValidateImageRef(ref).ok()) << ref;
  }
  EXPECT_FALSE(ValidateImageRef(std::string(600, 'a')).ok());
}

TEST(EnvNameTest, PortableNamesOnly) {
  for (const char* n : {"A", "_x", "CUDA_VISIBLE_DEVICES", "a1"})
    EXPECT_TRUE(ValidateEnvName(n).ok());
  for (const char* n : {"", "A=B", "1A", "A-B", "A B", "A\nB"}) {
    Status s = ValidateEnvName(n, "env.x");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << n;
    EXPECT_NE(s.message().find("env.x"), std::string::npos);
  }
}

TEST(SubmissionTest, NamesTheFieldThatIsWrong) {
  Job j;
  j.command = {"true"};
  EXPECT_TRUE(ValidateSubmission(j).ok());
  // No CPU asked is refused: nothing would count such jobs on a node (found by testing
  // as a hostile user: 100 jobs of --cpus 0 ran at once on a 2-CPU node).
  j.request.cpu_milli = 0;
  EXPECT_NE(ValidateSubmission(j).message().find("request.cpu_milli"), std::string::npos);
  j.request.cpu_milli = 1;
  EXPECT_TRUE(ValidateSubmission(j).ok());
  j.request.cpu_milli = 1000;
  j.env["A=B"] = "1";
  EXPECT_NE(ValidateSubmission(j).message().find("env.A=B"), std::string::npos);
  j.env.clear();
  j.env[""] = "1";
  EXPECT_FALSE(ValidateSubmission(j).ok());
  j.env.clear();
  j.image = "--privileged";
  EXPECT_NE(ValidateSubmission(j).message().find("image"), std::string::npos);
  j.image = "busybox";
  j.mounts.push_back({"relative", "/data", false});
  EXPECT_NE(ValidateSubmission(j).message().find("mounts[0].source"), std::string::npos);
  j.mounts.clear();
  j.workdir = "tmp";
  EXPECT_NE(ValidateSubmission(j).message().find("workdir"), std::string::npos);
}

// The red team: with projects not enforced (the default) a project was any text: escape
// sequences for whoever lists the queue, a megabyte kept per job and per /metrics series.
TEST(SubmissionTest, AProjectIsAShortNameWithoutControlCharacters) {
  Job j;
  j.command = {"true"};
  for (const char* ok : {"", "vision", "team/vision-2", "caf\xc3\xa9", "none"}) {
    j.project = ok;
    EXPECT_TRUE(ValidateSubmission(j).ok()) << ok;
  }
  for (std::string bad :
       {std::string(65, 'x'), std::string("red\x1b[31m"), std::string("a\nb"),
        std::string("\xc2\x9b"
                    "2J"),
        std::string("a\tb"), std::string("vision\xe2\x80\x8b"), std::string("\xe2\x80\xaenoisiv"),
        std::string("gpu-team "), std::string(" gpu-team")}) {
    j.project = bad;
    Status s = ValidateSubmission(j);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(s.message().starts_with("project: a project name of 1..64 bytes")) << s.message();
    EXPECT_EQ(s.message().find(bad), std::string::npos) << "the name is echoed";
  }
  j.project = std::string(64, 'x');
  EXPECT_TRUE(ValidateSubmission(j).ok());
  // The third red team: jobs of project "(none)" were counted with those of none in
  // usage and /metrics.
  j.project = "(none)";
  EXPECT_TRUE(ValidateSubmission(j).message().starts_with("project: '(none)' is how /metrics"));
}

// Issue 28: --min-runtime and --grace only with --preemptible; interactive jobs are never
// preempted. Each refusal names its field and the fix.
TEST(SubmissionTest, PreemptionFieldsNeedAPreemptibleBatchJob) {
  Job j;
  j.command = {"true"};
  j.min_runtime_s = 600;
  Status s = ValidateSubmission(j);
  EXPECT_NE(s.message().find("min_runtime_s: "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("add --preemptible"), std::string::npos) << s.message();
  j.min_runtime_s = 0;
  j.preempt_grace_s = 30;
  EXPECT_NE(ValidateSubmission(j).message().find("preempt_grace_s: "), std::string::npos);
  j.preemptible = true;
  EXPECT_TRUE(ValidateSubmission(j).ok());
  j.interactive = "run";
  s = ValidateSubmission(j);
  EXPECT_NE(s.message().find("preemptible: gpupool run is interactive"), std::string::npos)
      << s.message();
  // `gpupool run --grace 10s` was told to add --preemptible, which run refuses.
  j.preemptible = false;
  s = ValidateSubmission(j);
  EXPECT_EQ(s.message(),
            "preempt_grace_s: gpupool run is interactive and is never preempted; drop "
            "--min-runtime and --grace");
}

// client_keepalive is gpupool alloc's mark; on any other job it is refused by name.
TEST(SubmissionTest, ClientKeepaliveIsForAnAllocOnly) {
  Job j;
  j.command = {"true"};
  j.client_keepalive = true;
  Status s = ValidateSubmission(j);
  EXPECT_TRUE(s.message().starts_with("client_keepalive: only a gpupool alloc job")) << s.message();
  j.interactive = "run";
  EXPECT_FALSE(ValidateSubmission(j).ok());
  j.interactive = "alloc";
  j.command.clear();
  EXPECT_TRUE(ValidateSubmission(j).ok()) << ValidateSubmission(j).message();
}

// A share is sized by gpu_milli or by gpu_memory_bytes, and the bytes are bytes: the docs
// audit found both accepted (the memory won and gpu_milli was dropped without a word; 10
// bytes, meant as 10 GiB, scheduled as the smallest share).
TEST(SubmissionTest, AGpuShareIsSizedOnceAndInBytesOfAtLeastOneMiB) {
  Job j;
  j.command = {"x"};
  j.request.gpus = 1;
  j.request.gpu_memory_bytes = 10;
  Status s = ValidateSubmission(j);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "request.gpu_memory_bytes: 10 is below 1 MiB (1048576); the field counts bytes, "
            "e.g. 21474836480 for 20 GiB");
  j.request.gpu_memory_bytes = kMinGpuMemoryBytes;
  EXPECT_TRUE(ValidateSubmission(j).ok());
  j.request.gpu_milli = 250;
  s = ValidateSubmission(j);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("request.gpu_milli, request.gpu_memory_bytes: both size a share of "
                              "one GPU; give one or the other",
                              0),
            0u)
      << s.message();
  j.request.gpu_memory_bytes = 0;
  EXPECT_TRUE(ValidateSubmission(j).ok());
}

// CPU memory and /dev/shm are counted in bytes too: a size below 1 MiB (16 meant as 16 GiB)
// is refused naming the field and the unit, as gpu_memory_bytes; 0 is each one's default.
TEST(SubmissionTest, MemoryAndShmSizesAreBytesOfAtLeastOneMiB) {
  Job j;
  j.command = {"x"};
  j.request.memory_bytes = 16;
  Status s = ValidateSubmission(j);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "request.memory_bytes: 16 is below 1 MiB (1048576); the field counts bytes, e.g. "
            "17179869184 for 16 GiB (0 or absent: no explicit request)");
  j.request.memory_bytes = kMinMemoryBytes;
  EXPECT_TRUE(ValidateSubmission(j).ok());
  j.request.memory_bytes = 0;
  EXPECT_TRUE(ValidateSubmission(j).ok());
  j.image = "pytorch:2";
  j.shm_bytes = kMinMemoryBytes - 1;
  s = ValidateSubmission(j);
  EXPECT_EQ(s.message(),
            "shm_bytes: 1048575 is below 1 MiB (1048576); the field counts bytes, e.g. "
            "1073741824 for 1 GiB (0 or absent: podman's 64 MiB)");
  j.shm_bytes = kMinMemoryBytes;
  EXPECT_TRUE(ValidateSubmission(j).ok());
  j.shm_bytes = 0;
  EXPECT_TRUE(ValidateSubmission(j).ok());
}

// Slurm's --signal: sent before the time limit, so a job without one is refused, as are
// its when and whom without the signal, and interactive jobs (their commands run through
// gpupool exec, which it does not reach).
TEST(SubmissionTest, AWarningSignalNeedsATimeLimitAndABatchJob) {
  Job j;
  j.command = {"train"};
  j.workdir = "/w";
  j.warn_signal = 10;
  j.warn_time_s = 120;
  EXPECT_EQ(ValidateSubmission(j).message(),
            "warn_signal: --signal is sent a time before the time limit, and the job has none; "
            "give --time (time_limit_s)");
  j.time_limit_s = 120;  // sent at the start, before the job could catch it
  EXPECT_EQ(ValidateSubmission(j).message(),
            "warn_time_s: --signal's 120 s before the time limit is no earlier than the start "
            "(time limit 120 s), before the job could catch the signal; give fewer seconds "
            "(SIG@SECONDS, default 60) or a longer --time");
  j.time_limit_s = 3600;
  EXPECT_TRUE(ValidateSubmission(j).ok()) << ValidateSubmission(j).message();
  j.interactive = "run";
  EXPECT_NE(ValidateSubmission(j).message().find("warn_signal: gpupool run runs its commands"),
            std::string::npos)
      << ValidateSubmission(j).message();
  j.interactive.clear();
  j.warn_signal = 0;
  EXPECT_NE(ValidateSubmission(j).message().find("warn_time_s: says when"), std::string::npos)
      << ValidateSubmission(j).message();
  j.warn_time_s = 0;
  j.warn_main_only = true;
  EXPECT_NE(ValidateSubmission(j).message().find("warn_main_only: "), std::string::npos);
}

// --nodelist / --exclude: at most 4096 names each at submit, refused naming the field,
// the count and what to do instead; a job read back from the store is not held to it
// (JobFromJson takes longer lists: store/job_record_test.cc).
TEST(SubmissionTest, NodeListsHaveAtMost4096NamesEach) {
  Job j;
  j.command = {"x"};
  for (size_t i = 0; i < kMaxNodeNames; ++i) {
    j.request.nodelist.push_back("a" + std::to_string(i));
    j.request.exclude.push_back("b" + std::to_string(i));
  }
  EXPECT_TRUE(ValidateSubmission(j).ok());
  j.request.nodelist.push_back("a-more");
  Status s = ValidateSubmission(j);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "request.nodelist: at most 4096 node names (got 4097); name fewer, or exclude the "
            "few it may not use (exclude), or choose nodes by their GPUs (gpu_models, "
            "min_capability)");
  j.request.nodelist.pop_back();
  j.request.exclude.resize(65536, "b");
  s = ValidateSubmission(j);
  EXPECT_EQ(s.message(),
            "request.exclude: at most 4096 node names (got 65536); name fewer, or name the few "
            "it may use (nodelist), or choose nodes by their GPUs (gpu_models, min_capability)");
}

}  // namespace
}  // namespace gpupool::jobs
