// Replays inputs through a fuzz target without libFuzzer, so the committed corpus and
// regression inputs run as an ordinary test under g++ (and its ASan/UBSan build).
// Usage: fuzz_replay_TARGET PATH...   (a PATH is a file or a directory of files)
// Exits 1 when a path is missing or no input was found; a failing input crashes.
//
// Signals interrupt the inputs as they do under libFuzzer, whose -timeout watchdog is a
// SIGALRM every few seconds: a target's blocking calls (poll, recv) see EINTR there. Here
// an alarm comes every 20 ms, to this (the inputs') thread, so that a target that takes an
// interrupted call for an answer (http_request once read EINTR as "no answer in time")
// fails in ctest too, on any input that waits.
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

void OnAlarm(int) {}

// SIGALRM every 20 ms to the calling thread, with a handler that does nothing and no
// SA_RESTART: what libFuzzer's watchdog does to a blocked call, only more often.
void InterruptLikeLibFuzzer() {
  struct sigaction sa {};
  sa.sa_handler = OnAlarm;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGALRM, &sa, nullptr) != 0) return;
  sigevent ev{};
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGALRM;
  ev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
  timer_t timer;
  if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) return;
  itimerspec every{};
  every.it_interval.tv_nsec = 20'000'000;
  every.it_value.tv_nsec = 20'000'000;
  timer_settime(timer, 0, &every, nullptr);
}

bool RunOne(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return false;
  }
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  // A heap copy of exactly the input's size (as libFuzzer makes), so ASan reports a read
  // one byte past its end; the vector's spare capacity would hide it.
  const std::unique_ptr<uint8_t[]> exact(new uint8_t[bytes.size()]);
  std::copy(bytes.begin(), bytes.end(), exact.get());
  LLVMFuzzerTestOneInput(exact.get(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  InterruptLikeLibFuzzer();
  size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    std::vector<fs::path> files;
    if (fs::is_directory(arg, ec)) {
      for (const fs::directory_entry& e : fs::directory_iterator(arg, ec)) {
        if (e.is_regular_file(ec)) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
    } else if (fs::is_regular_file(arg, ec)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 1;
    }
    for (const fs::path& f : files) {
      if (!RunOne(f)) return 1;
      ++ran;
    }
  }
  if (ran == 0) {
    std::fprintf(stderr, "no inputs: give corpus directories or files\n");
    return 1;
  }
  std::printf("replayed %zu inputs\n", ran);
  return 0;
}
