"""The client's parts without a node: frames and their caps, the encoding
of what is signed, user ids and key files, reading the node's values and
its errors."""

from __future__ import annotations

import os
import socket
import stat
import struct
import tempfile
import threading
import unittest
from pathlib import Path

import cbor2

from zorilla import (
    Arch,
    BadRequestError,
    Client,
    ConnectionClosed,
    JobRequest,
    JobStatus,
    Kind,
    NodeError,
    OutcomeCode,
    OnWorkerLost,
    Phase,
    ProtocolError,
    StaleError,
    Tasks,
    TaskStatus,
    UnauthorizedError,
    UserKey,
    UserKeyError,
    Welcome,
    errors,
    requests,
    user,
    wire,
)


class Frames(unittest.TestCase):
    def test_the_hello_is_the_documented_bytes(self):
        # docs/protocol.md, "Example session".
        documented = "0000001f a3 6776657273696f6e03 66636c69656e7466707974686f6e 65746f6b656ef6"
        hello = {"version": 3, "client": "python", "token": None}
        self.assertEqual(wire.frame(hello).hex(), documented.replace(" ", ""))
        self.assertEqual(wire.frame(requests.ListJobs().to_wire()).hex(), "00000005644c697374")

    def pair(self):
        a, b = socket.socketpair()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        a.settimeout(10)
        return a, b

    def test_a_frame_over_the_cap_is_refused_before_it_is_read(self):
        a, b = self.pair()
        b.sendall(struct.pack(">I", wire.MAX_FRAME + 1))
        with self.assertRaises(ProtocolError):
            wire.receive(a)
        b.sendall(struct.pack(">I", 100) + b"x" * 100)
        with self.assertRaises(ProtocolError):
            wire.receive(a, max_frame=99)

    def test_a_frame_cut_short_or_not_cbor_is_an_error(self):
        a, b = self.pair()
        for not_cbor in [b"\x1c", b"\xff", b"\x01\x02", b"\x62a"]:
            b.sendall(struct.pack(">I", len(not_cbor)) + not_cbor)
            with self.assertRaises(ProtocolError, msg=not_cbor):
                wire.receive(a)
        b.sendall(struct.pack(">I", 10) + b"abc")
        b.shutdown(socket.SHUT_WR)
        with self.assertRaises(ConnectionClosed):
            wire.receive(a)

    def test_a_frame_arrives_in_pieces(self):
        a, b = self.pair()
        value = {"Logs": {"chunks": [], "next": 3, "ended": True}}
        data = wire.frame(value)

        def trickle():
            for i in range(len(data)):
                b.send(data[i : i + 1])

        writer = threading.Thread(target=trickle)
        writer.start()
        self.assertEqual(wire.receive(a), value)
        writer.join(timeout=10)

    def test_a_frame_over_the_cap_is_not_sent(self):
        with self.assertRaises(ProtocolError):
            wire.frame({"client": "x" * 5000}, wire.HELLO_MAX_FRAME)


class Signing(unittest.TestCase):
    def test_a_job_request_has_every_field_in_the_nodes_order(self):
        self.assertEqual(
            list(JobRequest().to_wire()),
            ["min_workers", "max_workers", "cores", "memory_mib", "disk_mib", "strategy",
             "lifetime_secs", "on_worker_lost", "args", "wall_time_secs", "cpu_time_secs"],
        )
        native = JobRequest(kind=Kind(Arch.X86_64)).to_wire()
        self.assertEqual(native["kind"], {"native": "x86_64"})
        self.assertEqual(JobRequest.from_wire(native), JobRequest(kind=Kind(Arch.X86_64)))
        # The optional fields come last, in the node's order, only when set.
        every = JobRequest(kind=Kind(Arch.X86_64), deterministic=7, priority=-3).to_wire()
        self.assertEqual(list(every)[-3:], ["kind", "deterministic", "priority"])
        self.assertEqual(JobRequest.from_wire(every).priority, -3)
        replicated = JobRequest(deterministic=0, replicas=3).to_wire()
        self.assertEqual(list(replicated)[-2:], ["deterministic", "replicas"])
        self.assertEqual(JobRequest.from_wire(replicated).replicas, 3)
        self.assertNotIn("replicas", JobRequest(replicas=1).to_wire())

    def test_a_job_arrays_tasks_are_encoded_only_when_set(self):
        # Not an array: no "tasks" (a signature made without it holds).
        self.assertNotIn("tasks", JobRequest().to_wire())
        self.assertNotIn("tasks", JobRequest(tasks=None, priority=1).to_wire())
        array = JobRequest.array(8, max_running=3, retries=1, args_file="params.txt", priority=2)
        wire_ = array.to_wire()
        self.assertEqual(list(wire_)[-2:], ["priority", "tasks"])
        self.assertEqual((wire_["min_workers"], wire_["max_workers"]), (1, 3))
        # Its fields in the node's order; args_file left out when None,
        # retries always there.
        self.assertEqual(list(wire_["tasks"].items()), [("count", 8), ("retries", 1), ("args_file", "params.txt")])
        self.assertEqual(JobRequest.array(4).to_wire()["tasks"], {"count": 4, "retries": 0})
        self.assertEqual(JobRequest.array(4).max_workers, 4)
        self.assertEqual(JobRequest.array(4, max_running=9).max_workers, 4)  # as `zorilla submit` does
        self.assertEqual(JobRequest.from_wire(wire_), array)
        self.assertEqual(JobRequest.from_wire(wire_).tasks, Tasks(8, 1, "params.txt"))
        self.assertIsNone(JobRequest.from_wire(JobRequest().to_wire()).tasks)
        self.assertEqual(Tasks.from_wire({"count": 2}), Tasks(2))
        # What is signed has it too.
        signed = cbor2.loads(user.submit_message(b"n" * 16, array, "ab", []))
        self.assertEqual(signed[2]["tasks"], {"count": 8, "retries": 1, "args_file": "params.txt"})

    def test_a_job_array_the_node_would_refuse_is_refused_ahead(self):
        JobRequest().check_array()  # a job of ranks: nothing to check
        JobRequest(min_workers=2, max_workers=5).check_array()
        refused = {
            "tasks is 0, but must be from 1 to 10000": lambda: JobRequest.array(0),
            "tasks is 10001, but must be from 1 to 10000": lambda: JobRequest.array(10001),
            "retries is 11, but must be at most 10": lambda: JobRequest.array(3, retries=11),
            "max_running is 0, but must be from 1 to 3": lambda: JobRequest.array(3, max_running=0),
            "max_running is 4, but must be from 1 to 3": lambda: JobRequest(
                max_workers=4, tasks=Tasks(3)).check_array(),
            "a job array runs 1 to max_running (3) workers at once, not 2 to 3": lambda: JobRequest(
                min_workers=2, max_workers=3, tasks=Tasks(3)).check_array(),
            "rollback": lambda: JobRequest.array(3, on_worker_lost=OnWorkerLost.ROLLBACK),
        }
        for sentence, make in refused.items():
            with self.assertRaises(ValueError, msg=sentence) as caught:
                make()
            self.assertIn(sentence, str(caught.exception))

    def test_what_is_signed_has_the_nonce_as_an_array_of_bytes(self):
        nonce = bytes(range(16))
        message = cbor2.loads(user.submit_message(nonce, JobRequest(), "ab", [("in", "cd")]))
        self.assertEqual(message[0], "zorilla submit 1")
        self.assertEqual(message[1], list(range(16)))
        self.assertEqual(message[4], [["in", "cd"]])
        owner = cbor2.loads(user.owner_message(nonce, 7, requests.Logs(5, 2, 10)))
        self.assertEqual(owner, ["zorilla owner request 1", list(range(16)), 7,
                                 {"Logs": {"job": 5, "from": 2, "wait_secs": 10}}])

    def test_a_proof_is_the_users_signature(self):
        key = UserKey.generate()
        request = requests.Status(9)
        proof = key.prove(b"n" * 16, 3, request)
        self.assertTrue(user.verify(key.id, user.owner_message(b"n" * 16, 3, request), proof.signature))
        self.assertFalse(user.verify(key.id, user.owner_message(b"n" * 16, 4, request), proof.signature))
        wrapped = requests.Owner(proof, request).to_wire()
        self.assertEqual(wrapped["Owner"]["request"], {"Status": {"job": 9}})
        self.assertEqual(wrapped["Owner"]["proof"]["seq"], 3)


class Keys(unittest.TestCase):
    def test_a_user_id_names_its_key(self):
        key = UserKey.generate()
        self.assertTrue(key.id.startswith("12D3KooW"), key.id)
        self.assertEqual(user.public_key_of(key.id), key.public_key)
        for bad in ["", "0OIl", "12D3KooW", "Qm" + "1" * 44]:
            with self.assertRaises(ValueError):
                user.public_key_of(bad)
        self.assertEqual(user.b58decode(user.b58encode(b"\0\0\x01\x02")), b"\0\0\x01\x02")

    def test_a_key_file_is_made_once_mode_0600(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "conf" / "zorilla" / "user.key"
            made = UserKey.load_or_create(path)
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            data = path.read_bytes()
            self.assertEqual((len(data), data[:4]), (68, b"\x08\x01\x12\x40"))
            self.assertEqual(UserKey.load_or_create(path).id, made.id)
            self.assertEqual(os.listdir(path.parent), ["user.key"])

    def test_a_file_that_holds_no_ed25519_key_is_refused(self):
        good = UserKey.generate().to_bytes()
        other = UserKey.generate().to_bytes()
        for bad in [b"", b"\x08\x02\x12\x40" + good[4:], good[:-1], good[:36] + other[36:], b"\x0a\xff"]:
            with self.assertRaises(UserKeyError):
                UserKey.from_bytes(bad)

    def test_the_default_path_is_the_zorilla_tools(self):
        saved = dict(os.environ)
        try:
            for k in ("ZORILLA_USER_KEY", "XDG_CONFIG_HOME"):
                os.environ.pop(k, None)
            os.environ["HOME"] = "/home/u"
            self.assertEqual(user.default_key_path(), Path("/home/u/.config/zorilla/user.key"))
            os.environ["XDG_CONFIG_HOME"] = "/x"
            self.assertEqual(user.default_key_path(), Path("/x/zorilla/user.key"))
            os.environ["ZORILLA_USER_KEY"] = "/k"
            self.assertEqual(user.default_key_path(), Path("/k"))
        finally:
            os.environ.clear()
            os.environ.update(saved)


class Values(unittest.TestCase):
    # docs/protocol.md's example status.
    STATUS = {
        "job": 7, "phase": "completed", "reason": "all 1 workers exited with status 0",
        "ranks": {0: {"node": "12D3KooWx", "outcome": "exited with status 0", "code": "exited",
                      "exit_status": 0}},
        "request": {"min_workers": 1, "max_workers": 1, "cores": 1, "memory_mib": 64, "disk_mib": 0,
                    "strategy": "concentrate", "lifetime_secs": 60, "on_worker_lost": "fail",
                    "args": ["one"], "wall_time_secs": 0, "cpu_time_secs": 0},
        "pending": None, "submitted_unix": 1, "home": "12D3KooWx", "moved_from": None, "owner": None,
        "a_field_of_a_newer_node": 1,
    }

    def test_a_status_is_read_into_its_types(self):
        status = JobStatus.from_wire(self.STATUS)
        self.assertEqual(status.phase, Phase.COMPLETED)
        self.assertTrue(status.is_terminal)
        self.assertEqual(status.id, "0000000000000007")
        self.assertEqual(status.ranks[0].code, OutcomeCode.EXITED)
        self.assertTrue(status.ranks[0].succeeded)
        self.assertEqual(status.request.args, ["one"])
        newer = dict(self.STATUS, ranks={0: {"node": "n", "outcome": "?", "code": "some_new_code"}})
        self.assertEqual(JobStatus.from_wire(newer).ranks[0].code, "some_new_code")

    def test_a_job_arrays_progress_is_read_with_its_failed_tasks_as_ranks(self):
        self.assertIsNone(JobStatus.from_wire(self.STATUS).tasks)
        array = dict(self.STATUS, phase="failed", ranks={}, tasks={
            "count": 8, "waiting": 0, "running": 0, "done": 7, "failed": 1,
            "failed_tasks": {5: {"node": "12D3KooWx", "outcome": "exited with status 3",
                                 "code": "exited", "exit_status": 3}},
        })
        tasks = JobStatus.from_wire(array).tasks
        self.assertIsInstance(tasks, TaskStatus)
        self.assertEqual((tasks.count, tasks.waiting, tasks.running, tasks.done, tasks.failed), (8, 0, 0, 7, 1))
        self.assertEqual(list(tasks.failed_tasks), [5])
        self.assertEqual((tasks.failed_tasks[5].code, tasks.failed_tasks[5].exit_status), (OutcomeCode.EXITED, 3))
        self.assertFalse(tasks.failed_tasks[5].succeeded)
        for broken in [dict(array, tasks=[]), dict(array, tasks={"count": -1}),
                       dict(array, tasks={"count": 1, "failed_tasks": {"5": {"node": "n"}}}),
                       dict(array, tasks={"count": 1, "failed_tasks": {5: {"outcome": None}}})]:
            with self.assertRaises(ProtocolError, msg=broken["tasks"]):
                JobStatus.from_wire(broken)

    def test_a_value_of_the_wrong_type_is_a_protocol_error(self):
        for broken in [dict(self.STATUS, job="seven"), dict(self.STATUS, phase="paused"),
                       dict(self.STATUS, ranks={0: {"outcome": None}}), [1, 2], dict(self.STATUS, job=True)]:
            with self.assertRaises(ProtocolError):
                JobStatus.from_wire(broken)

    def test_each_error_kind_is_its_exception(self):
        self.assertIsInstance(errors.node_error("BadRequest", "m"), BadRequestError)
        self.assertIsInstance(errors.node_error("Unauthorized", "m"), UnauthorizedError)
        self.assertIsInstance(errors.node_error("Stale", "m"), StaleError)
        newer = errors.node_error("SomethingNew", "m")
        self.assertIs(type(newer), NodeError)
        self.assertEqual(str(newer), "SomethingNew: m")
        self.assertEqual(len(errors.ERRORS), 8)
        for kind, cls in errors.ERRORS.items():
            self.assertEqual(cls("x").kind, kind)


class FakeNode:
    """A node that answers a script over a socket pair: each step the
    request it expects (checked by the test) and the answer it sends."""

    def __init__(self, test: unittest.TestCase, script):
        self.client_side, self.node_side = socket.socketpair()
        test.addCleanup(self.client_side.close)
        test.addCleanup(self.node_side.close)
        self.node_side.settimeout(10)
        self.client_side.settimeout(10)
        self.script = script
        self.asked = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()
        self.user = UserKey.generate()
        self.client = Client(self.client_side, Welcome(3, "12D3KooWnode", b"w" * 16), self.user)

    def serve(self):
        for answer in self.script:
            try:
                self.asked.append(wire.receive(self.node_side))
            except Exception:  # the client closed: the test says why
                return
            wire.send(self.node_side, answer)

    def done(self):
        self.thread.join(timeout=10)
        return self.asked


class AgainstAFakeNode(unittest.TestCase):
    def owner(self, asked, key):
        """The nonce, sequence number and request of an owner's request,
        its signature by ``key`` checked."""
        proof, request = asked["Owner"]["proof"], asked["Owner"]["request"]
        self.assertEqual(proof["user"], key.id)
        message = wire.encode(["zorilla owner request 1", list(proof["nonce"]), proof["seq"], request])
        self.assertTrue(user.verify(key.id, message, proof["signature"]))
        return proof["nonce"], proof["seq"], request

    def test_a_stale_nonce_is_replaced_once_and_sequence_numbers_rise(self):
        status = dict(Values.STATUS, job=5)
        node = FakeNode(self, [
            {"Challenge": {"nonce": b"A" * 16}},
            {"Error": {"kind": "Stale", "message": "ask again"}},
            {"Challenge": {"nonce": b"B" * 16}},
            {"Status": status},
            {"Status": status},
        ])
        self.assertEqual(node.client.status(5).job, 5)
        self.assertEqual(node.client.status(5).job, 5)
        asked = node.done()
        self.assertEqual(asked[0], {"Challenge": {"job": 5}})
        self.assertEqual(self.owner(asked[1], node.user), (b"A" * 16, 0, {"Status": {"job": 5}}))
        self.assertEqual(asked[2], {"Challenge": {"job": 5}})
        self.assertEqual(self.owner(asked[3], node.user), (b"B" * 16, 0, {"Status": {"job": 5}}))
        self.assertEqual(self.owner(asked[4], node.user)[:2], (b"B" * 16, 1))

    def test_outputs_are_listed_page_by_page_and_read_block_by_block(self):
        node = FakeNode(self, [
            {"Challenge": {"nonce": b"A" * 16}},
            {"Outputs": {"files": [{"name": "0/a", "size": 3}], "more": True}},
            {"Outputs": {"files": [{"name": "1/b", "size": 0}], "more": False}},
            {"OutputBlock": {"data": b"ab", "size": 3}},
            {"OutputBlock": {"data": b"c", "size": 3}},
        ])
        self.assertEqual([(o.name, o.size) for o in node.client.outputs(7)], [("0/a", 3), ("1/b", 0)])
        self.assertEqual(node.client.read_output(7, "0/a"), b"abc")
        requests_asked = [self.owner(a, node.user)[2] for a in node.done()[1:]]
        self.assertEqual(requests_asked, [
            {"Outputs": {"job": 7, "after": ""}},
            {"Outputs": {"job": 7, "after": "0/a"}},
            {"OutputBlock": {"job": 7, "name": "0/a", "offset": 0, "len": 4 * 1024 * 1024}},
            {"OutputBlock": {"job": 7, "name": "0/a", "offset": 2, "len": 4 * 1024 * 1024}},
        ])

    def test_an_output_named_out_of_its_directory_is_refused(self):
        node = FakeNode(self, [
            {"Challenge": {"nonce": b"A" * 16}},
            {"Outputs": {"files": [{"name": "0/../../etc/x", "size": 1}], "more": False}},
        ])
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(ProtocolError):
                node.client.fetch(7, tmp)
            self.assertEqual(os.listdir(tmp), [])

    def test_an_arrays_lines_go_as_an_input_its_tasks_name(self):
        node = FakeNode(self, [{"Submitted": {"job": 9}}])
        lines = ["1", "2 3", "", "fail"]
        job = node.client.submit_array(b"\0asm", lines, JobRequest(args=["x"]), inputs={"a": b"A"}, retries=2)
        self.assertEqual(job, 9)
        (asked,) = node.done()
        submit = asked["Submit"]
        self.assertEqual(submit["job"]["tasks"], {"count": 4, "retries": 2, "args_file": "task_args.txt"})
        self.assertEqual((submit["job"]["min_workers"], submit["job"]["max_workers"]), (1, 4))
        self.assertEqual(submit["job"]["args"], ["x"])
        self.assertEqual(submit["inputs"], [{"name": "a", "data": b"A"},
                                            {"name": "task_args.txt", "data": b"1\n2 3\n\nfail\n"}])
        # Signed as sent.
        hashes = [(f["name"], user._sha256_hex(f["data"])) for f in submit["inputs"]]
        message = user.submit_message(b"w" * 16, JobRequest.from_wire(submit["job"]),
                                      user._sha256_hex(submit["module"]), hashes)
        self.assertTrue(user.verify(node.user.id, message, submit["owner"]["signature"]))

    def test_an_array_the_node_would_refuse_is_not_sent(self):
        node = FakeNode(self, [])
        refusals = [
            lambda: node.client.submit(b"\0asm", JobRequest(max_workers=3, tasks=Tasks(2))),
            lambda: node.client.submit_array(b"\0asm", 3, retries=11),
            lambda: node.client.submit_array(b"\0asm", []),
            lambda: node.client.submit_array(b"\0asm", ["1", "2\n3"]),
            lambda: node.client.submit_array(b"\0asm", "1\n2\n"),
            lambda: node.client.submit_array(b"\0asm", ["1"], inputs={"task_args.txt": b""}),
        ]
        for refused in refusals:
            with self.assertRaises(ValueError):
                refused()
        self.assertEqual(node.done(), [])

    def test_an_answer_of_the_wrong_kind_is_a_protocol_error(self):
        node = FakeNode(self, ["Ok"])
        with self.assertRaises(ProtocolError):
            node.client.node_info()


if __name__ == "__main__":
    unittest.main()
