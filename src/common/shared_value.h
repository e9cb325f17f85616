// SharedValue<T>: a container value that its copies share until one of them changes it
// (copy on write). A copy costs a reference count, not a copy of the T: the 1,000
// elements of a job array made by copying one job hold one copy of its command line and
// environment between them (issue 25 item 7: each element held its own, and 100
// elements of a 0.9 MB environment took 96 MB of the controller).
//
// Reads: get(), the conversion to const T&, and the container's reading members (begin,
// end, size, find, ...), which never copy. Changes: mutate(), or the changing members
// (operator[] on a non-const SharedValue, clear, insert, emplace, push_back, erase),
// which first copy the T when another SharedValue shares it, so a change is never seen
// by the copies. Compared by content.
//
// A value type: like a T, it may be read from many threads at once and needs a lock for
// a change beside other uses of the same SharedValue; distinct SharedValues sharing one
// T may be used from any threads (the shared T itself is never changed).
#pragma once

#include <initializer_list>
#include <memory>
#include <utility>

namespace gpupool {

template <class T>
class SharedValue {
 public:
  using value_type = typename T::value_type;
  using size_type = typename T::size_type;
  using const_iterator = typename T::const_iterator;
  using iterator = const_iterator;  // reading only: change through mutate()

  SharedValue() = default;
  SharedValue(T value)  // NOLINT(google-explicit-constructor): as a T field was
      : p_(std::make_shared<T>(std::move(value))) {}
  SharedValue(std::initializer_list<value_type> values) : SharedValue(T(values)) {}
  SharedValue& operator=(T value) {
    p_ = std::make_shared<T>(std::move(value));
    return *this;
  }
  SharedValue& operator=(std::initializer_list<value_type> values) { return *this = T(values); }

  const T& get() const { return p_ ? *p_ : Empty(); }
  operator const T&() const { return get(); }  // NOLINT(google-explicit-constructor)
  // The value to change: a copy of its own first, when another SharedValue shares it.
  T& mutate() {
    if (!p_) {
      p_ = std::make_shared<T>();
    } else if (p_.use_count() > 1) {
      p_ = std::make_shared<T>(*p_);
    }
    return *p_;
  }
  // Whether `other` holds the very same T (not only an equal one).
  bool SharesWith(const SharedValue& other) const { return p_ != nullptr && p_ == other.p_; }

  const_iterator begin() const { return get().begin(); }
  const_iterator end() const { return get().end(); }
  size_type size() const { return get().size(); }
  bool empty() const { return get().empty(); }
  template <class K>
  auto find(const K& key) const {
    return get().find(key);
  }
  template <class K>
  size_type count(const K& key) const {
    return get().count(key);
  }
  template <class K>
  decltype(auto) at(const K& key) const {
    return get().at(key);
  }
  template <class K>
  decltype(auto) operator[](const K& key) const {
    return get()[key];
  }
  decltype(auto) front() const { return get().front(); }
  decltype(auto) back() const { return get().back(); }

  template <class K>
  decltype(auto) operator[](K&& key) {
    return mutate()[std::forward<K>(key)];
  }
  void clear() { p_.reset(); }
  template <class... A>
  decltype(auto) insert(A&&... a) {
    return mutate().insert(std::forward<A>(a)...);
  }
  template <class... A>
  decltype(auto) emplace(A&&... a) {
    return mutate().emplace(std::forward<A>(a)...);
  }
  template <class V>
  void push_back(V&& v) {
    mutate().push_back(std::forward<V>(v));
  }
  template <class K>
  auto erase(const K& key) {
    return mutate().erase(key);
  }

  friend bool operator==(const SharedValue& a, const SharedValue& b) {
    return a.p_ == b.p_ || a.get() == b.get();
  }
  friend bool operator==(const SharedValue& a, const T& b) { return a.get() == b; }

 private:
  static const T& Empty() {
    static const T* empty = new T();
    return *empty;
  }

  std::shared_ptr<T> p_;  // null: an empty T
};

}  // namespace gpupool
