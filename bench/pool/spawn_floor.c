// The machine's per-process floor for bench_pool_vs_slurm.sh --cpu-breakdown: how much
// wall time and CPU one posix_spawn + waitpid of a command costs, N times in a row.
//
//   spawn_floor [-a] N CMD [ARG...]
//
// Prints one JSON object: runs, wall_ms_per_run, cpu_ms_per_run (the children's user +
// system time from getrusage(RUSAGE_CHILDREN), plus this process's own, per run) and
// the command. Every run must exit 0, or it stops with code 1; -a accepts any exit.
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char** environ;

static double Ms(struct timeval tv) { return tv.tv_sec * 1e3 + tv.tv_usec / 1e3; }

static double CpuMs(int who) {
  struct rusage ru;
  getrusage(who, &ru);
  return Ms(ru.ru_utime) + Ms(ru.ru_stime);
}

static double NowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
  int any_exit = 0;
  if (argc > 1 && strcmp(argv[1], "-a") == 0) {
    any_exit = 1;
    ++argv;
    --argc;
  }
  if (argc < 3) {
    fprintf(stderr, "usage: spawn_floor [-a] N CMD [ARG...]\n");
    return 2;
  }
  const int n = atoi(argv[1]);
  if (n < 1) {
    fprintf(stderr, "spawn_floor: N must be >= 1\n");
    return 2;
  }
  const double cpu0 = CpuMs(RUSAGE_CHILDREN) + CpuMs(RUSAGE_SELF);
  const double t0 = NowMs();
  for (int i = 0; i < n; ++i) {
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[2], NULL, NULL, argv + 2, environ);
    if (rc != 0) {
      fprintf(stderr, "spawn_floor: cannot start %s: %s\n", argv[2], strerror(rc));
      return 1;
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        (WEXITSTATUS(status) != 0 && !any_exit)) {
      fprintf(stderr, "spawn_floor: %s did not exit 0 (status %d)\n", argv[2], status);
      return 1;
    }
  }
  const double wall = NowMs() - t0;
  const double cpu = CpuMs(RUSAGE_CHILDREN) + CpuMs(RUSAGE_SELF) - cpu0;
  printf("{\"runs\": %d, \"wall_ms_per_run\": %.4f, \"cpu_ms_per_run\": %.4f, \"command\": \"", n,
         wall / n, cpu / n);
  for (int i = 2; i < argc; ++i) {
    for (const char* c = argv[i]; *c; ++c) {
      if (*c == '"' || *c == '\\') putchar('\\');
      putchar(*c);
    }
    if (i + 1 < argc) putchar(' ');
  }
  printf("\"}\n");
  return 0;
}
