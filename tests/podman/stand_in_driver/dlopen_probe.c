/* Loads each library named on the command line as a CUDA program loads the driver,
 * dlopen("libcuda.so.1"), and prints one line per library: "dlopen NAME: ok" or the
 * loader's error. Exits 1 when any failed. Runs inside the test containers, so it
 * needs nothing beyond the C library. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  int failed = 0;
  for (int i = 1; i < argc; ++i) {
    void* handle = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
      printf("dlopen %s: %s\n", argv[i], dlerror());
      failed = 1;
      continue;
    }
    /* Copied, not cast: ISO C has no conversion from void* to a function pointer. */
    int (*cu_init)(unsigned int) = NULL;
    void* symbol = dlsym(handle, "cuInit");
    memcpy(&cu_init, &symbol, sizeof symbol);
    if (cu_init != NULL) {
      printf("dlopen %s: ok (cuInit -> %d)\n", argv[i], cu_init(0));
    } else {
      printf("dlopen %s: ok\n", argv[i]);
    }
    dlclose(handle);
  }
  return failed;
}
