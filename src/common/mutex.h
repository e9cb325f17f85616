// A mutex the thread-safety analysis knows (thread_annotations.h), and its scoped locks.
// std::mutex carries no annotations in libstdc++, so fields guarded by one could not be
// checked. MutexLock holds it for a scope; UniqueLock too, and is what a condition
// variable waits with (Clock::WaitUntil takes its native()).
//
// Thread-safe, as std::mutex.
#pragma once

#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace gpupool {

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  std::mutex& native() { return mu_; }
  // Tells the analysis the mutex is held where it cannot see so: in a condition
  // variable's predicate, which runs with the waiting UniqueLock's mutex held.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Held for its scope; condition variables wait with native(), which unlocks and locks
// the same mutex (the analysis sees it held throughout, as it is on return).
class SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.native()) {}
  ~UniqueLock() RELEASE() {}
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;
  std::unique_lock<std::mutex>& native() { return lock_; }
  // Lets the mutex go for a while (a store read that must not run under it), and takes
  // it again; the analysis sees it released in between.
  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace gpupool
