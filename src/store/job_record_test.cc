#include "store/job_record.h"

#include <gtest/gtest.h>

#include "jobs/job_json.h"

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

// Rows of three arrays, the first's spec again between the third's rows, and a job
// written whole, as a listing reads them.
struct Listing {
  std::vector<JobRecord> records;
  std::vector<JobRow> rows;
};

Listing MakeListing() {
  Listing l;
  for (int a = 0; a < 3; ++a) {
    jobs::Job j;
    j.user = "alice";
    j.command = {"python3", "sweep.py", std::to_string(a)};
    j.env = {{"SEED", std::to_string(a)}};
    for (int i = 0; i < 50; ++i) {
      j.array_index = i;
      j.priority = i % 7;
      l.records.push_back(EncodeJobRecord(j));
    }
  }
  jobs::Job whole;
  whole.command = {"true"};
  l.records.push_back(EncodeJobRecord(whole));
  for (size_t i = 0; i < l.records.size(); ++i) {
    JobRow r;
    r.id = static_cast<int64_t>(i) + 1;
    r.version = 3;
    r.body = l.records[i].body;
    const int64_t spec = static_cast<int64_t>(i < 150 ? i / 50 : 3);
    if (i < 150) {
      r.spec_id = spec == 2 && i % 2 == 0 ? 0 : spec;  // spec 0 again, interleaved
      r.spec = l.records[static_cast<size_t>(*r.spec_id) * 50].spec;
    } else {
      l.records[i].body = DumpJson(jobs::JobToJson(whole));  // before job_specs: no spec
      r.body = l.records[i].body;
    }
    l.rows.push_back(r);
  }
  return l;
}

// A load of many rows is decoded on several threads: the same jobs in the same order as
// on one, and the jobs of one spec share one command and environment across the slices.
TEST(DecodeJobRowsTest, SlicesGiveWhatOneThreadGives) {
  const Listing l = MakeListing();
  const std::vector<jobs::Job> one = DecodeJobRows(l.rows, 1).value();
  const std::vector<jobs::Job> four = DecodeJobRows(l.rows, 4, 1).value();
  ASSERT_EQ(one.size(), l.rows.size());
  ASSERT_EQ(four.size(), l.rows.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(DumpJson(jobs::JobToJson(four[i])), DumpJson(jobs::JobToJson(one[i]))) << i;
    EXPECT_EQ(four[i].id, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(four[i].version, 3);
  }
  // Four slices: rows 0-36, 37-74, 75-112, 113-150. Spec 0: rows 0-49 and the even ones
  // of 100-148; spec 1: rows 50-99; spec 2: the odd ones of 101-149.
  for (const std::vector<jobs::Job>* jobs : {&one, &four}) {
    EXPECT_TRUE((*jobs)[148].command.SharesWith((*jobs)[0].command));
    EXPECT_TRUE((*jobs)[148].env.SharesWith((*jobs)[0].env));
    EXPECT_TRUE((*jobs)[99].command.SharesWith((*jobs)[50].command));
    EXPECT_TRUE((*jobs)[99].env.SharesWith((*jobs)[50].env));
    EXPECT_TRUE((*jobs)[149].env.SharesWith((*jobs)[101].env));
    EXPECT_FALSE((*jobs)[50].command.SharesWith((*jobs)[0].command));
    EXPECT_FALSE((*jobs)[101].env.SharesWith((*jobs)[0].env));
  }
  EXPECT_EQ(four[150].command.get(), std::vector<std::string>{"true"});
}

TEST(DecodeJobRowsTest, TheFirstBadRowsErrorWhateverTheSlices) {
  Listing l = MakeListing();
  l.rows[120].body = "{\"state\": \"SLEEPING\"}";
  l.rows[30].body = "{\"surprise\": 1}";
  for (int threads : {1, 2, 8}) {
    Result<std::vector<jobs::Job>> r = DecodeJobRows(l.rows, threads, 1);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("stored job 31"), std::string::npos)
        << r.status().message();
  }
}

// A job stored by a server from before the 4096-name bound on --nodelist / --exclude
// (it took 65536 each) still loads: decoding applies no submit-time bound, and its check
// that no name is in both lists sorts rather than searching one list per name of the
// other (which took 25 s for these lists, on each read of the row).
TEST(DecodeJobRecordTest, AStoredJobWithLongNodeListsStillDecodes) {
  jobs::Job j;
  j.command = {"true"};
  for (int i = 0; i < 65535; ++i) j.request.nodelist.push_back("a" + std::to_string(i));
  j.request.nodelist.push_back("n1");
  for (int i = 0; i < 65536; ++i) j.request.exclude.push_back("b" + std::to_string(i));
  const JobRecord r = EncodeJobRecord(j);
  Result<jobs::Job> back = DecodeJobRecord(9, 1, r.body, r.spec);
  ASSERT_TRUE(back.ok()) << back.status().message().substr(0, 300);
  EXPECT_EQ(back->request.nodelist, j.request.nodelist);
  EXPECT_EQ(back->request.exclude, j.request.exclude);
  // A name in both is still found in such lists (the last of each list here).
  j.request.exclude.back() = "n1";
  const JobRecord both = EncodeJobRecord(j);
  back = DecodeJobRecord(9, 1, both.body, both.spec);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("nodelist, exclude: node 'n1' is in both"),
            std::string::npos)
      << back.status().message();
}

}  // namespace
}  // namespace gpupool::store::internal
