#include "cli/config_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <map>

#include "cli/commands.h"
#include "cli/daemon_commands.h"

namespace gpupool::cli {
namespace {

using ::testing::HasSubstr;

// A command shaped like `gpupool server` / `gpupool agent`.
struct Flags {
  std::string state_dir;
  int port = 8421;
  std::vector<std::string> podman_args;
  bool allow = false;
  std::string token;
};

void AddFlags(CLI::App* cmd, Flags* f) {
  cmd->add_option("--state-dir", f->state_dir);
  cmd->add_option("--port", f->port)->check(CLI::Range(0, 65535));
  cmd->add_option("--podman-arg", f->podman_args)->allow_extra_args(false);
  cmd->add_flag("--allow-unisolated-devices", f->allow);
  cmd->add_option("--token", f->token);
}

ConfigFile Parse(std::string_view text) { return ParseConfigText(text, "test.conf").value(); }

TEST(ConfigFileTest, ParsesSectionsKeysLinesAndComments) {
  ConfigFile cfg = Parse(
      "# a comment\n"
      "; another\n"
      "[server]\n"
      "port = 9000 ; inline comment\n"
      "\n"
      "[agent]\n"
      "podman-arg = --root\n"
      "podman-arg = /srv/containers\n");
  ASSERT_EQ(cfg.entries.size(), 3u);
  EXPECT_EQ(cfg.entries[0].section, "server");
  EXPECT_EQ(cfg.entries[0].key, "port");
  EXPECT_EQ(cfg.entries[0].value, "9000");
  EXPECT_EQ(cfg.entries[0].line, 4);
  EXPECT_EQ(cfg.entries[2].value, "/srv/containers");
  EXPECT_EQ(cfg.entries[2].line, 8);
}

TEST(ConfigFileTest, SyntaxErrorsNameTheLine) {
  Result<ConfigFile> r = ParseConfigText("[server]\nport 9000\n", "x.conf");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("x.conf line 2: not a [section]"));

  r = ParseConfigText("port = 1\n", "x.conf");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("line 1: key 'port' is outside a section"));

  r = ParseConfigText("[server]\nlisten = " + std::string(300, 'a') + "\n", "x.conf");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("line 2: the line is longer than"));
}

// A `#` after a value is part of it (libinih): `state-dir = /srv/x  # keep jobs here` made a
// new empty state directory named with the comment. It is refused, naming the line and key.
TEST(ConfigFileTest, ACommentAfterAValueIsRefused) {
  for (const char* line : {"state-dir = /tmp/x  # keep jobs here", "state-dir = /tmp/x\t#tab",
                           "state-dir = # nothing yet"}) {
    Result<ConfigFile> r = ParseConfigText("# ok\n[server]\n" + std::string(line) + "\n", "x.conf");
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_THAT(r.status().message(), HasSubstr("x.conf line 3: [server] state-dir = '"));
    EXPECT_THAT(r.status().message(), HasSubstr("put the comment on a line of its own"));
  }
  // A `#` inside a word stays part of the value; a ` ;` comment is libinih's own.
  ConfigFile cfg = Parse("[server]\nstore = postgresql://h/db#x\nport = 9000 ; a comment\n");
  EXPECT_EQ(cfg.entries[0].value, "postgresql://h/db#x");
  EXPECT_EQ(cfg.entries[1].value, "9000");
}

TEST(ConfigFileTest, UnknownSectionsAndKeysAndRepeatsAreErrors) {
  CLI::App app;
  Flags f;
  AddFlags(&app, &f);
  const ConfigSchema schema{{"server", ConfigKeysOf(app)}};
  EXPECT_TRUE(schema.at("server").at("podman-arg"));
  EXPECT_FALSE(schema.at("server").at("port"));
  EXPECT_EQ(schema.at("server").count("help"), 0u);

  Status s = CheckConfigKeys(Parse("[server]\nprot = 1\n"), schema);
  EXPECT_THAT(s.message(), HasSubstr("test.conf line 2: [server] prot: unknown key"));
  EXPECT_THAT(s.message(), HasSubstr("port"));

  s = CheckConfigKeys(Parse("[sever]\nport = 1\n"), schema);
  EXPECT_THAT(s.message(), HasSubstr("line 2: unknown section [sever]: the sections are [server]"));

  s = CheckConfigKeys(Parse("[server]\nport = 1\nport = 2\n"), schema);
  EXPECT_THAT(s.message(), HasSubstr("line 3: [server] port: given again (first at line 2)"));

  EXPECT_TRUE(CheckConfigKeys(Parse("[server]\npodman-arg = a\npodman-arg = b\n"), schema).ok());
}

TEST(ConfigFileTest, FileSetsWhatTheCommandLineDoesNot) {
  CLI::App app;
  Flags f;
  AddFlags(&app, &f);
  app.parse(std::vector<std::string>{"/cli", "--state-dir"});  // CLI11 parses in reverse
  ConfigFile cfg = Parse(
      "[server]\nstate-dir = /file\nport = 9000\npodman-arg = --root\npodman-arg = /r\n"
      "allow-unisolated-devices = true\n");
  ASSERT_TRUE(ApplyConfig(cfg, {"server"}, {}, &app).ok());
  EXPECT_EQ(f.state_dir, "/cli");
  EXPECT_EQ(f.port, 9000);
  EXPECT_EQ(f.podman_args, (std::vector<std::string>{"--root", "/r"}));
  EXPECT_TRUE(f.allow);
}

TEST(ConfigFileTest, EarlierSectionWinsAndOtherCommandsKeysAreSkipped) {
  CLI::App app;
  Flags f;
  AddFlags(&app, &f);
  app.parse(std::vector<std::string>{});
  ConfigFile cfg = Parse("[server]\nport = 1\n[agent]\nport = 2\ncontroller = unix:/x\n");
  ASSERT_TRUE(ApplyConfig(cfg, {"server", "agent"}, {}, &app).ok());
  EXPECT_EQ(f.port, 1);
}

TEST(ConfigFileTest, BadValuesNameKeyLineAndFix) {
  CLI::App app("", "server");
  Flags f;
  AddFlags(&app, &f);
  app.parse(std::vector<std::string>{});
  Status s = ApplyConfig(Parse("[server]\n\nport = 70000\n"), {"server"}, {}, &app);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("test.conf line 3: [server] port = '70000'"));
  EXPECT_THAT(s.message(), HasSubstr("fix the value"));

  CLI::App app2;
  Flags f2;
  AddFlags(&app2, &f2);
  app2.parse(std::vector<std::string>{});
  s = ApplyConfig(Parse("[server]\nport = many\n"), {"server"}, {}, &app2);
  EXPECT_THAT(s.message(), HasSubstr("line 2: [server] port = 'many'"));

  CLI::App app3;
  Flags f3;
  AddFlags(&app3, &f3);
  app3.parse(std::vector<std::string>{});
  s = ApplyConfig(Parse("[server]\nallow-unisolated-devices = perhaps\n"), {"server"}, {}, &app3);
  EXPECT_THAT(s.message(), HasSubstr("line 2: [server] allow-unisolated-devices = 'perhaps'"));
}

TEST(ConfigFileTest, SecretsOnlyFromPrivateFiles) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("gpupool-config-test-" + std::to_string(::getpid()) + ".conf"))
                               .string();
  std::ofstream(path) << "[agent]\ntoken = secret\n";
  std::filesystem::permissions(path, std::filesystem::perms(0644));
  ConfigFile cfg = ReadConfigFile(path).value();
  CLI::App app;
  Flags f;
  AddFlags(&app, &f);
  app.parse(std::vector<std::string>{});
  Status s = ApplyConfig(cfg, {"agent"}, {"token"}, &app);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("line 2: [agent] token: the file is readable by every user"));
  EXPECT_THAT(s.message(), HasSubstr("chmod 600 " + path));

  std::filesystem::permissions(path, std::filesystem::perms(0600));
  cfg = ReadConfigFile(path).value();
  ASSERT_TRUE(ApplyConfig(cfg, {"agent"}, {"token"}, &app).ok());
  EXPECT_EQ(f.token, "secret");
  std::filesystem::remove(path);

  Result<ConfigFile> missing = ReadConfigFile(path);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("pass an existing file to --config"));
}

}  // namespace
}  // namespace gpupool::cli

namespace gpupool::cli {
namespace {

// Issue 25 item 7: the bounds on the queue are keys of [server] (and options of `server`
// and `up`), checked when the file is read.
TEST(ConfigFileTest, TheServersQueueBoundsAreKeysWithTheirRanges) {
  CLI::App app;
  cli::CommandContext ctx;
  RegisterDaemonCommands(app, ctx);
  for (const char* name : {"server", "up"}) {
    CLI::App* cmd = app.get_subcommand(name);
    const std::map<std::string, bool> keys = ConfigKeysOf(*cmd);
    for (const char* key :
         {"max-queued-per-user", "max-queued-total", "max-array-size", "max-submission-bytes",
          "max-queued-bytes-per-user", "max-queued-bytes-total"}) {
      EXPECT_EQ(keys.count(key), 1u) << name << " " << key;
    }
  }
  CLI::App* server = app.get_subcommand("server");
  EXPECT_EQ(server->get_option("--max-queued-per-user")->as<int64_t>(), 10000);
  EXPECT_EQ(server->get_option("--max-queued-total")->as<int64_t>(), 100000);
  EXPECT_EQ(server->get_option("--max-array-size")->as<int>(), 1001);
  EXPECT_EQ(server->get_option("--max-submission-bytes")->as<int64_t>(), 1048576);
  EXPECT_EQ(server->get_option("--max-queued-bytes-per-user")->as<int64_t>(), 268435456);
  EXPECT_EQ(server->get_option("--max-queued-bytes-total")->as<int64_t>(), 1073741824);
  ASSERT_TRUE(ApplyConfig(ParseConfigText("[server]\nmax-queued-per-user = 50\n"
                                          "max-queued-total = 500\nmax-array-size = 20\n"
                                          "max-submission-bytes = 65536\n"
                                          "max-queued-bytes-per-user = 1000000\n"
                                          "max-queued-bytes-total = 5000000\n",
                                          "test.conf")
                              .value(),
                          {"server"}, {}, server)
                  .ok());
  EXPECT_EQ(server->get_option("--max-queued-per-user")->as<int64_t>(), 50);
  EXPECT_EQ(server->get_option("--max-queued-total")->as<int64_t>(), 500);
  EXPECT_EQ(server->get_option("--max-array-size")->as<int>(), 20);
  EXPECT_EQ(server->get_option("--max-submission-bytes")->as<int64_t>(), 65536);
  EXPECT_EQ(server->get_option("--max-queued-bytes-per-user")->as<int64_t>(), 1000000);
  EXPECT_EQ(server->get_option("--max-queued-bytes-total")->as<int64_t>(), 5000000);

  CLI::App again;
  RegisterDaemonCommands(again, ctx);
  Status s = ApplyConfig(ParseConfigText("[server]\nmax-array-size = 0\n", "test.conf").value(),
                         {"server"}, {}, again.get_subcommand("server"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("test.conf line 2: [server] max-array-size = '0'"));
  EXPECT_THAT(s.message(), HasSubstr("not in range 1 to 1000001"));
  CLI::App third;
  RegisterDaemonCommands(third, ctx);
  s = ApplyConfig(ParseConfigText("[server]\nmax-submission-bytes = 100\n", "test.conf").value(),
                  {"server"}, {}, third.get_subcommand("server"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("test.conf line 2: [server] max-submission-bytes = '100'"));
}

}  // namespace
}  // namespace gpupool::cli

namespace gpupool::cli {
namespace {

// Fair share by project: `fair-by` is a key of [server] (and an option of `server` and
// `up`), user by default; anything but user or project is refused naming the key, its
// line and both values (the command line's --fair-by has the same check).
TEST(ConfigFileTest, FairByIsAKeyOfUserOrProject) {
  cli::CommandContext ctx;
  for (const char* name : {"server", "up"}) {
    CLI::App app;
    RegisterDaemonCommands(app, ctx);
    CLI::App* cmd = app.get_subcommand(name);
    EXPECT_EQ(ConfigKeysOf(*cmd).count("fair-by"), 1u) << name;
    EXPECT_EQ(cmd->get_option("--fair-by")->as<std::string>(), "user") << name;
    ASSERT_TRUE(ApplyConfig(ParseConfigText("[server]\nfair-by = project\n", "test.conf").value(),
                            {"server"}, {}, cmd)
                    .ok());
    EXPECT_EQ(cmd->get_option("--fair-by")->as<std::string>(), "project") << name;
  }
  CLI::App bad;
  RegisterDaemonCommands(bad, ctx);
  Status s = ApplyConfig(ParseConfigText("[server]\n\nfair-by = account\n", "test.conf").value(),
                         {"server"}, {}, bad.get_subcommand("server"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("test.conf line 3: [server] fair-by = 'account'"));
  EXPECT_THAT(s.message(), HasSubstr("--fair-by: account not in {user,project}"));
}

}  // namespace
}  // namespace gpupool::cli

namespace gpupool::cli {
namespace {

// A bad value found after parsing (checked against another option, or by the module that
// takes it) names the file, line and key when the file set it; as it is otherwise.
TEST(ConfigFileTest, LaterChecksNameTheLineOfTheOptionTheFileSet) {
  CLI::App app("", "server");
  Flags f;
  AddFlags(&app, &f);
  app.parse(std::vector<std::string>{"/cli", "--state-dir"});
  ConfigOrigins origins;
  ASSERT_TRUE(ApplyConfig(Parse("[server]\n\nport = 9000\nstate-dir = /file\n"), {"server"}, {},
                          &app, &origins)
                  .ok());
  EXPECT_EQ(origins.by_key.count("state-dir"), 0u);  // the command line's
  ASSERT_EQ(origins.by_key.count("port"), 1u);

  Status s = WithConfigOrigin(Status::InvalidArgument("--port: 9000 is taken"), origins, "server");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "test.conf line 3: [server] port = '9000': --port: 9000 is taken: fix the value (see "
            "`gpupool server --help`) or remove the line");
  // A flag of the command line, a longer name, no flag at all: as they are.
  for (const char* m : {"--state-dir: no", "--ports: no", "--portable: no", "no flag"}) {
    EXPECT_EQ(WithConfigOrigin(Status::InvalidArgument(m), origins, "server").message(), m);
  }
  // The first flag named that the file set.
  origins.by_key["mps-one-size"] = ConfigEntry{"server", "mps-one-size", "true", 7};
  s = WithConfigOrigin(Status::InvalidArgument("--state-dir, --mps-one-size and --port: pick one"),
                       origins, "server");
  EXPECT_THAT(s.message(), HasSubstr("test.conf line 7: [server] mps-one-size = 'true': "));
}

}  // namespace
}  // namespace gpupool::cli
