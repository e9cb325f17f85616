// Clang's thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html),
// as LevelDB and Abseil spell them: a field says which mutex guards it (GUARDED_BY), a
// function which mutex it needs held (REQUIRES) or not held (EXCLUDES). Under clang with
// -Wthread-safety (scripts/check-thread-safety.sh, run by the tests) a read or write
// without the mutex is a compile error; other compilers see nothing.
#pragma once

#if defined(__clang__)
#define GP_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GP_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) GP_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY GP_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) GP_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) GP_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) GP_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define REQUIRES(...) GP_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) GP_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) GP_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define EXCLUDES(...) GP_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define RETURN_CAPABILITY(x) GP_THREAD_ANNOTATION(lock_returned(x))
#define ASSERT_CAPABILITY(x) GP_THREAD_ANNOTATION(assert_capability(x))
#define NO_THREAD_SAFETY_ANALYSIS GP_THREAD_ANNOTATION(no_thread_safety_analysis)
