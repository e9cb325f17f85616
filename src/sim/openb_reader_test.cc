// Reader error cases name the file, line and field; good input round-trips.
#include "sim/openb_reader.h"

#include <gtest/gtest.h>

namespace gpupool::sim {
namespace {

Result<std::vector<sched::Task>> Pods(const std::string& text) {
  GP_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Parse(text, "pods.csv"));
  return ParseOpenbPods(t);
}
Result<std::vector<sched::NodeSpec>> Nodes(const std::string& text) {
  GP_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Parse(text, "nodes.csv"));
  return ParseOpenbNodes(t);
}

TEST(OpenbReaderTest, ReadsPodsByColumnName) {
  auto pods = Pods(
      "gpu_milli,name,cpu_milli,memory_mib,num_gpu,gpu_spec,extra\r\n"
      "500,p1,4000,1024,1,V100M16|T4,x\r\n"
      "\n"
      "1000,p2,8000,2048,2,,y\r\n"
      "0,p3,1000,512,0,G2,z\r\n");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 3u);
  EXPECT_EQ((*pods)[0].name, "p1");
  EXPECT_EQ((*pods)[0].gpu_milli, 500);
  EXPECT_EQ((*pods)[0].gpu_models, (std::vector<std::string>{"T4", "V100M16"}));
  EXPECT_EQ((*pods)[1].num_gpu, 2);
  EXPECT_TRUE((*pods)[1].gpu_models.empty());
  EXPECT_TRUE((*pods)[2].gpu_models.empty());  // CPU-only tasks ignore gpu_spec
}

TEST(OpenbReaderTest, FiveColumnPodListsWork) {
  auto pods = Pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,2,1,1000\n");
  ASSERT_TRUE(pods.ok());
  EXPECT_EQ(pods->at(0).cpu_milli, 1);
}

void ExpectError(const Result<std::vector<sched::Task>>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(OpenbReaderTest, BadPodsNameFileLineAndField) {
  const std::string h = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
  ExpectError(Pods("name,cpu_milli,memory_mib,num_gpu\np,1,2,0\n"),
              "pods.csv:1: missing column 'gpu_milli'");
  ExpectError(Pods(h + "p,1,2,0,0\nq,abc,2,0,0\n"),
              "pods.csv:3: field 'cpu_milli': 'abc' is not a whole number");
  ExpectError(Pods(h + "p,1,-2,0,0\n"),
              "pods.csv:2: field 'memory_mib': negative value -2 is not allowed");
  ExpectError(Pods(h + "p,1,2,1,1001\n"), "pods.csv:2: field 'gpu_milli' is 1001");
  ExpectError(Pods(h + "p,1,2,2,500\n"), "fractional shares need num_gpu 1");
  ExpectError(Pods(h + "p,1,2,1\n"), "pods.csv:2: 4 fields where the header has 5");
  ExpectError(Pods(h + "p,1,2,0,300\n"), "give both or neither");
  ExpectError(Pods(h + "p,1,2,1,\n"), "field 'gpu_milli': empty");
  ExpectError(Pods(""), "empty file");
  ExpectError(Pods(h + "\"p,1,2,1,1\n"), "unterminated quoted field");
}

TEST(OpenbReaderTest, NodesAndTheirErrors) {
  auto nodes =
      Nodes("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,P100\nn2,32000,1024,0,\n");
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(nodes->at(0).num_gpus, 2);
  EXPECT_EQ(nodes->at(0).gpu_model, "P100");
  EXPECT_TRUE(nodes->at(1).gpu_model.empty());
  auto missing = Nodes("sn,cpu_milli,memory_mib,gpu\nn,1,1,1\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing column 'model'"), std::string::npos);
  auto no_model = Nodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,\n");
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(no_model.status().message().find("nodes.csv:2: field 'model'"), std::string::npos);
  auto bad = Nodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,x,T4\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nodes.csv:2: field 'gpu'"), std::string::npos);
}

TEST(OpenbReaderTest, MissingFileIsAnError) {
  auto r = ReadOpenbPods("/nonexistent/dir/pods.csv");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/dir/pods.csv"), std::string::npos);
  EXPECT_EQ(WorkloadName("/a/b/openb_pod_list_default.csv"), "openb_pod_list_default");
}

}  // namespace
}  // namespace gpupool::sim
