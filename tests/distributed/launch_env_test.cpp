// distributed::read_launch_env through a fake environment: what torchrun, Slurm
// scripts and people set, and the launches it must refuse with the variable named.
#include "distributed/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>

namespace fptrain::distributed {
namespace {

using Vars = std::map<std::string, std::string>;

std::optional<LaunchEnv> read(const Vars& vars) {
  return read_launch_env([&vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// The message of the std::invalid_argument that reading `vars` throws ("" if none).
std::string refusal(const Vars& vars) {
  try {
    read(vars);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// What torchrun gives the worker with global rank 3 of 2 nodes x 2 processes.
Vars torchrun_worker() {
  return {{"RANK", "3"},
          {"LOCAL_RANK", "1"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"GROUP_RANK", "1"},
          {"MASTER_ADDR", "node-a"},
          {"MASTER_PORT", "29400"},
          {"TORCHELASTIC_RUN_ID", "job-7"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"TORCHELASTIC_RESTART_COUNT", "2"}};
}

TEST(LaunchEnv, NoVariablesOrOneProcessIsNotAGroup) {
  EXPECT_FALSE(read({}).has_value());
  EXPECT_FALSE(read({{"WORLD_SIZE", "1"}}).has_value());
  EXPECT_FALSE(read({{"WORLD_SIZE", "1"}, {"RANK", "0"}}).has_value());
  EXPECT_FALSE(read({{"WORLD_SIZE", "1"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}, {"LOCAL_RANK", "0"}}).has_value());
  EXPECT_FALSE(read({{"RANK", "0"}}).has_value());  // rank 0 of nothing: one process
  EXPECT_FALSE(read({{"WORLD_SIZE", ""}, {"RANK", ""}}).has_value());  // empty counts as unset
  EXPECT_FALSE(read({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}}).has_value());  // an address alone
}

TEST(LaunchEnv, TorchrunWorkerUsesTheAgentStoreUnderItsAttemptPrefix) {
  const auto env = read(torchrun_worker());
  ASSERT_TRUE(env.has_value());
  EXPECT_TRUE(env->distributed());
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "node-a");
  EXPECT_EQ(env->master_port, 29400);
  EXPECT_TRUE(env->under_torchrun);
  EXPECT_TRUE(env->use_agent_store);
  EXPECT_EQ(env->store_prefix, "/worker/attempt_2");
  const std::string d = env->describe();
  EXPECT_NE(d.find("rank 3/4 (local 1/2)"), std::string::npos) << d;
  EXPECT_NE(d.find("node-a:29400"), std::string::npos) << d;
  EXPECT_NE(d.find("torchrun's agent store"), std::string::npos) << d;

  // The first attempt when torchrun does not say which.
  Vars first = torchrun_worker();
  first.erase("TORCHELASTIC_RESTART_COUNT");
  EXPECT_EQ(read(first)->store_prefix, "/worker/attempt_0");
  // Every spelling of true torch uses; anything else: rank 0 hosts the store.
  for (const char* yes : {"1", "true", "TRUE"}) {
    Vars v = torchrun_worker();
    v["TORCHELASTIC_USE_AGENT_STORE"] = yes;
    EXPECT_TRUE(read(v)->use_agent_store) << yes;
  }
  for (const char* no : {"False", "0", "no"}) {
    Vars v = torchrun_worker();
    v["TORCHELASTIC_USE_AGENT_STORE"] = no;
    const auto e = read(v);
    EXPECT_FALSE(e->use_agent_store) << no;
    EXPECT_EQ(e->store_prefix, "") << no;
    EXPECT_TRUE(e->under_torchrun) << no;
  }
  Vars bad = torchrun_worker();
  bad["TORCHELASTIC_RESTART_COUNT"] = "again";
  EXPECT_NE(refusal(bad).find("TORCHELASTIC_RESTART_COUNT='again'"), std::string::npos) << refusal(bad);
}

TEST(LaunchEnv, ByHandRankZeroHostsTheStoreAtTheDefaultPort) {
  const auto r1 = read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}});
  ASSERT_TRUE(r1.has_value());
  EXPECT_EQ(r1->rank, 1);
  EXPECT_EQ(r1->world_size, 2);
  EXPECT_EQ(r1->local_rank, 1);  // no LOCAL_RANK: one node
  EXPECT_EQ(r1->local_world_size, 2);
  EXPECT_EQ(r1->master_port, 29500);
  EXPECT_FALSE(r1->use_agent_store);
  EXPECT_FALSE(r1->under_torchrun);
  EXPECT_EQ(r1->store_prefix, "");
  const auto r0 = read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}});
  ASSERT_TRUE(r0.has_value());
  EXPECT_EQ(r0->master_port, 1);
  EXPECT_NE(r0->describe().find("(hosted here)"), std::string::npos) << r0->describe();
  // Slurm-style: 8 ranks, 4 per node, LOCAL_RANK from the launcher.
  const auto s = read({{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "n0"}});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->local_rank, 2);  // rank % local world
  EXPECT_EQ(s->local_world_size, 4);
}

TEST(LaunchEnv, InconsistentLaunchesAreRefusedNamingTheVariable) {
  const Vars ok = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29501"}};
  ASSERT_EQ(refusal(ok), "");
  auto with = [&ok](const std::string& k, const std::string& v) {
    Vars x = ok;
    x[k] = v;
    return x;
  };
  auto without = [&ok](const std::string& k) {
    Vars x = ok;
    x.erase(k);
    return x;
  };
  struct Case {
    Vars vars;
    std::string says;
  };
  const std::vector<Case> cases = {
      {without("MASTER_ADDR"), "MASTER_ADDR is not set"},
      {with("RANK", "2"), "RANK='2' must be an integer in [0, 1]"},
      {with("RANK", "-1"), "RANK='-1'"},
      {with("RANK", "one"), "RANK='one'"},
      {with("RANK", "1x"), "RANK='1x'"},
      {with("WORLD_SIZE", "two"), "WORLD_SIZE='two'"},
      {with("WORLD_SIZE", "0"), "WORLD_SIZE='0'"},
      {with("WORLD_SIZE", "2.0"), "WORLD_SIZE='2.0'"},
      {with("MASTER_PORT", "70000"), "MASTER_PORT='70000'"},
      {with("MASTER_PORT", "0"), "MASTER_PORT='0'"},
      {with("MASTER_PORT", "http"), "MASTER_PORT='http'"},
      {with("LOCAL_RANK", "2"), "LOCAL_RANK='2'"},  // LOCAL_WORLD_SIZE defaults to WORLD_SIZE = 2
      {with("LOCAL_WORLD_SIZE", "3"), "LOCAL_WORLD_SIZE='3'"},
      {without("RANK"), "RANK is not"},
      {{{"RANK", "1"}}, "WORLD_SIZE is not"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "1"}}, "RANK='1'"},
  };
  for (const Case& c : cases) {
    const std::string e = refusal(c.vars);
    EXPECT_NE(e.find(c.says), std::string::npos) << "expected \"" << c.says << "\", got \"" << e << "\"";
  }
}

}  // namespace
}  // namespace fptrain::distributed
