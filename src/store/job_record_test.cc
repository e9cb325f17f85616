#include "store/job_record.h"

#include <gtest/gtest.h>

namespace gpupool::store::internal {
namespace {

// A listing keeps a bounded number of parsed specs (restarting with 298 queued jobs of
// 0.9 MB held each twice until the listing ended), and the jobs read from a spec share
// its command and environment even when it was parsed again in between.
TEST(SpecCacheTest, KeepsParsedSpecsUpToItsBoundAndStillShares) {
  jobs::Job a;
  a.command = {"python3", "sweep.py"};
  a.env = {{"DATA", std::string(100, 'a')}};
  jobs::Job b = a;
  b.env = {{"DATA", std::string(100, 'b')}};
  const JobRecord ra = EncodeJobRecord(a);
  const JobRecord rb = EncodeJobRecord(b);
  SpecCache cache(ra.spec.size() + 10);  // room for one
  int parses = 0;
  auto read = [&](int64_t spec_id, const JobRecord& r) {
    const Json* spec = cache
                           .Get(spec_id,
                                [&] {
                                  ++parses;
                                  return r.spec;
                                })
                           .value();
    jobs::Job j = DecodeJobRecord(7, 1, r.body, spec).value();
    cache.Share(spec_id, &j);
    return j;
  };
  const jobs::Job a1 = read(1, ra);
  const jobs::Job a2 = read(1, ra);
  EXPECT_EQ(parses, 1);
  const jobs::Job b1 = read(2, rb);  // A's parsed spec goes
  EXPECT_EQ(parses, 2);
  const jobs::Job a3 = read(1, ra);
  EXPECT_EQ(parses, 3);
  EXPECT_TRUE(a2.env.SharesWith(a1.env));
  EXPECT_TRUE(a3.env.SharesWith(a1.env));
  EXPECT_TRUE(a3.command.SharesWith(a1.command));
  EXPECT_FALSE(b1.env.SharesWith(a1.env));
  EXPECT_EQ(a3.env, a.env);
  EXPECT_EQ(b1.env, b.env);
}

}  // namespace
}  // namespace gpupool::store::internal
