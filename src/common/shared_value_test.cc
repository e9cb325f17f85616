#include "common/shared_value.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace gpupool {
namespace {

using Argv = SharedValue<std::vector<std::string>>;
using Vars = SharedValue<std::map<std::string, std::string>>;

TEST(SharedValueTest, CopiesShareOneValue) {
  Vars a = std::map<std::string, std::string>{{"A", std::string(1 << 20, 'x')}};
  Vars b = a;
  EXPECT_TRUE(b.SharesWith(a));
  EXPECT_EQ(&b.get(), &a.get());  // one copy of the megabyte, not two
  EXPECT_EQ(b, a);
}

TEST(SharedValueTest, AChangeCopiesFirstAndIsNotSeenByTheOthers) {
  Vars a = {{"A", "1"}};
  Vars b = a;
  b["B"] = "2";
  EXPECT_FALSE(b.SharesWith(a));
  EXPECT_EQ(a.get(), (std::map<std::string, std::string>{{"A", "1"}}));
  EXPECT_EQ(b.get(), (std::map<std::string, std::string>{{"A", "1"}, {"B", "2"}}));
  Argv x = {"python3", "train.py"};
  Argv y = x;
  y.push_back("--lr");
  x.clear();
  EXPECT_TRUE(x.empty());
  EXPECT_EQ(y, (std::vector<std::string>{"python3", "train.py", "--lr"}));
}

TEST(SharedValueTest, AValueNobodySharesIsChangedInPlace) {
  Vars a = {{"A", "1"}};
  const std::map<std::string, std::string>* before = &a.get();
  a["A"] = "2";
  EXPECT_EQ(&a.get(), before);
  EXPECT_EQ(a.at("A"), "2");
}

TEST(SharedValueTest, ReadsAsTheContainerAndComparesByContent) {
  Argv empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty, Argv(std::vector<std::string>{}));
  Argv argv = {"a", "b"};
  EXPECT_EQ(argv[1], "b");
  EXPECT_EQ(argv.front(), "a");
  const std::vector<std::string>& plain = argv;  // where a vector is wanted
  EXPECT_EQ(plain.size(), 2u);
  EXPECT_EQ(argv, Argv({"a", "b"}));  // equal content, two values
  EXPECT_NE(argv, Argv({"a"}));
  Vars vars = {{"K", "v"}};
  EXPECT_EQ(vars.count("K"), 1u);
  EXPECT_NE(vars.find("K"), vars.end());
  int n = 0;
  for (const auto& [k, v] : vars) n += static_cast<int>(k.size() + v.size());
  EXPECT_EQ(n, 2);
}

}  // namespace
}  // namespace gpupool
