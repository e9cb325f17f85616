#!/usr/bin/env python3
"""`gpupool agent` against a controller whose agent protocol is too far from its own
(issue 27): the controller refuses the registration with 409 and its version
({"error", "protocol"}, protocol::EncodeRegistrationRefusal), and the agent stops at once,
exits 1 and says both versions and which side to upgrade. It used to take the 409 for
"unavailable" and retry forever. A 409 refusing a second agent under a live node's name
({"error", "refused": "agent_id"}) stops it too, with exit status 2. Any other 409 (a
controller that lost its lease) is still retried. The controller here is a stand-in that answers only the registration; the
real controller's refusal is checked in api_test.cc.

Usage: agent_protocol_test.py PATH_TO_GPUPOOL NODE_JSON
"""
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
NODE = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "node.json"


class StandInController:
    """Answers every POST /v1/agent/register with 409 and `answer`; counts them."""

    def __init__(self, answer):
        self.registrations = 0
        self.registered = threading.Condition()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path.startswith("/v1/agent/register"):
                    with outer.registered:
                        outer.registrations += 1
                        outer.registered.notify_all()
                body = json.dumps(answer).encode()
                self.send_response(409)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = "http://127.0.0.1:%d" % self.server.server_address[1]

    def wait_registrations(self, n, timeout):
        with self.registered:
            return self.registered.wait_for(lambda: self.registrations >= n, timeout)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class AgentProtocolTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gp-agent-protocol-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def agent(self, controller):
        return subprocess.Popen(
            [GPUPOOL, "agent", "--controller", controller.address, "--token", "gpt_x",
             "--fake", NODE, "--node-name", "n1", "--telemetry-interval", "0",
             "--state-dir", os.path.join(self.dir, "state")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def refused_by(self, version, answer=None):
        controller = StandInController(answer or
            {"error": "the agent on node n1 speaks agent protocol ... too far apart",
             "protocol": version})
        try:
            agent = self.agent(controller)
            try:
                _, err = agent.communicate(timeout=30)
            finally:
                agent.kill()
            self.assertEqual(controller.registrations, 1, "it asked again: " + err)
            return agent.returncode, err
        finally:
            controller.close()

    def test_a_newer_controller_stops_the_agent_which_is_to_be_upgraded(self):
        rc, err = self.refused_by("9.0")
        self.assertEqual(rc, 1, err)
        self.assertIn("gpupool: the controller speaks agent protocol 9.0 and this agent (node n1) ",
                      err)
        self.assertIn("upgrade gpupool on this agent (node n1)\n", err)

    def test_an_older_controller_stops_the_agent_and_is_named_to_upgrade(self):
        rc, err = self.refused_by("0.1")
        self.assertEqual(rc, 1, err)
        self.assertIn("the controller speaks agent protocol 0.1", err)
        self.assertIn("upgrade gpupool on the controller\n", err)

    def test_a_second_agent_under_a_live_nodes_name_says_so_and_tries_again_later(self):
        why = ("node n1 is run by another agent (at 10.0.0.1, last poll 1.0 s ago; ...): "
               "give this agent another --node-name, or stop the other agent first")
        controller = StandInController({"error": why, "refused": "agent_id"})
        agent = self.agent(controller)
        try:
            seen = ""
            while "trying again in 30 s" not in seen:
                line = agent.stderr.readline()
                self.assertTrue(line, "the agent ended: " + seen)
                seen += line
            self.assertIn("controller answered 409: " + why + " (trying again in 30 s)", seen)
            # Not sooner: the other agent's node is free only once it stops polling.
            self.assertEqual(controller.registrations, 1, seen)
            self.assertIsNone(agent.poll(), "the agent stopped")
        finally:
            agent.terminate()
            agent.communicate(timeout=30)
            controller.close()

    def test_another_409_is_tried_again(self):
        controller = StandInController({"error": "the lease was lost: controller c2 leads"})
        agent = self.agent(controller)
        try:
            self.assertTrue(controller.wait_registrations(2, 30), "the agent did not retry")
            self.assertIsNone(agent.poll(), "the agent stopped")
        finally:
            agent.terminate()
            agent.communicate(timeout=30)
            controller.close()


if __name__ == "__main__":
    unittest.main()
