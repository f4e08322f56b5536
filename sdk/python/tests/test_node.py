"""The client against real `zorilla-node` processes: a job submitted with
a user's key runs to completion, its logs are followed and its outputs
fetched; a job array runs its tasks, retries and lists a failing one, and
has outputs per task; another user's key is refused for it; a job is
cancelled and resized; the node's errors arrive as their exceptions; and
the user id the client computes is the one `zorilla whoami` prints for the
same key file.
"""

from __future__ import annotations

import os
import stat
import tempfile
import unittest
from pathlib import Path

import zorilla
import zorilla.client
from zorilla import (
    BadRequestError,
    Client,
    JobRequest,
    NotFoundError,
    OutcomeCode,
    Phase,
    Strategy,
    Tasks,
    UnauthorizedError,
    UserKey,
    VersionError,
)

from nodes import Node, all_of, module, zorilla as zorilla_tool

#: How long a small job may take from submit to its end (a debug build
#: compiles the module first).
JOB_TIMEOUT = 120.0
#: How many tasks of an array run at once on the one node. More stall
#: there: a task granted while the node's last running worker of the array
#: ends is never started (the node drops the array's worker record,
#: node/src/node/members.rs `worker_ended`, before the task's module is
#: prepared), so its home waits for it forever. A home that runs no tasks
#: itself is not affected (its workers' nodes keep the job's copy).
ONE_AT_A_TIME = 1


class OneNode(unittest.TestCase):
    """One node without a token (no admin: only a job's owner sees its
    details), two users: alice, whose key this package makes, and bob,
    whose key the `zorilla` tool makes."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="zorilla-python-")
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.dir = Path(cls.tmp.name)
        cls.node = Node(cls.dir / "node")
        # Stopped even if what follows fails (tearDownClass would not run).
        cls.addClassCleanup(cls.node.stop)
        cls.alice_key = cls.dir / "alice" / "user.key"
        cls.alice = UserKey.load_or_create(cls.alice_key)
        cls.bob_key = cls.dir / "bob" / "user.key"
        cls.bob_whoami = zorilla_tool("whoami", user_key=cls.bob_key)
        cls.bob = UserKey.load(cls.bob_key)

    def connect(self, user: UserKey) -> Client:
        return Client.connect(self.node.client, user=user, token=None, name="python-test")

    def submit_hello(self, client: Client, workers: int = 1) -> int:
        return client.submit(
            module("hello"),
            JobRequest.workers(workers, args=["one", "two"], strategy=Strategy.SPREAD),
            inputs={"name.txt": b"reader\n"},
        )

    def test_user_ids_are_zorilla_whoamis(self):
        # A key this package made, read by the `zorilla` tool ...
        self.assertEqual(zorilla_tool("whoami", user_key=self.alice_key)["user"], self.alice.id)
        self.assertEqual(stat.S_IMODE(os.stat(self.alice_key).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(self.alice_key.parent).st_mode) & 0o077, 0)
        # ... and one the tool made, read by this package.
        self.assertEqual(self.bob_whoami["user"], self.bob.id)
        self.assertTrue(self.bob.id.startswith("12D3KooW"), self.bob.id)
        self.assertEqual(UserKey.load_or_create(self.alice_key).id, self.alice.id)

    def test_a_job_runs_its_logs_are_followed_and_its_outputs_fetched(self):
        with self.connect(self.alice) as client:
            job = self.submit_hello(client, workers=2)
            chunks = all_of(client.follow(job, timeout=JOB_TIMEOUT))
            status = client.status(job)
            self.assertEqual(status.phase, Phase.COMPLETED, status.reason)
            self.assertTrue(status.is_terminal)
            self.assertEqual(status.owner, self.alice.id)
            self.assertEqual(status.home, self.node.peer)
            self.assertEqual(status.request.args, ["one", "two"])
            self.assertEqual(sorted(status.ranks), [0, 1])
            for rank in status.ranks.values():
                self.assertEqual(rank.code, OutcomeCode.EXITED)
                self.assertEqual(rank.exit_status, 0)
                self.assertTrue(rank.succeeded)
            # Each rank's output whole (the ranks' chunks interleave).
            for rank in (0, 1):
                stdout = b"".join(c.data for c in chunks if c.rank == rank and not c.stderr)
                stderr = b"".join(c.data for c in chunks if c.rank == rank and c.stderr)
                self.assertEqual(stdout, b"Hello, reader!\narg 1: one\narg 2: two\n")
                self.assertEqual(stderr, b"hello: wrote /outputs/greeting.txt\n")
            # What follow gave is all the logs there are.
            self.assertEqual([c.data for c in client.logs(job)], [c.data for c in chunks])
            # The outputs, listed page by page, read block by block and fetched.
            outputs = client.outputs(job)
            self.assertEqual(
                [(o.name, o.size) for o in outputs], [("0/greeting.txt", 15), ("1/greeting.txt", 15)]
            )
            self.assertEqual(client.read_output(job, "1/greeting.txt"), b"Hello, reader!\n")
            block = client.output_block(job, "0/greeting.txt", 7, 4)
            self.assertEqual((block.data, block.size), (b"read", 15))
            fetched = client.fetch(job, self.dir / "results")
            self.assertEqual(len(fetched), 2)
            self.assertEqual((self.dir / "results" / "0" / "greeting.txt").read_bytes(), b"Hello, reader!\n")
            # Waiting for a job that is over returns at once.
            self.assertEqual(client.wait(job, timeout=JOB_TIMEOUT).phase, Phase.COMPLETED)

    def test_a_deterministic_job_signed_with_its_seed_gives_the_same_bits_twice(self):
        with self.connect(self.alice) as client:
            runs = []
            for _ in range(2):
                job = client.submit(module("detcheck"), JobRequest.workers(2, deterministic=7))
                status = client.wait(job, timeout=JOB_TIMEOUT)
                self.assertEqual(status.phase, Phase.COMPLETED, status.reason)
                self.assertEqual(status.request.deterministic, 7)
                runs.append([client.read_output(job, f"{rank}/det.txt") for rank in (0, 1)])
            self.assertEqual(runs[0], runs[1])
            self.assertNotEqual(runs[0][0], runs[0][1])  # the rank keys the random bytes
            self.assertIn(b"nan payload+1 7ff8000000000000", runs[0][0])

    def test_an_array_retries_a_failing_task_lists_it_and_has_outputs_per_task(self):
        # Eight tasks, a line of arguments each; task 5's always fails
        # (examples/src/sweep.c exits 3 on "fail"). One at a time (see
        # ONE_AT_A_TIME).
        lines = ["fail" if i == 5 else str(10 + i) for i in range(8)]
        with self.connect(self.alice) as client:
            job = client.submit_array(
                module("sweep"), lines, JobRequest(lifetime_secs=120), max_running=ONE_AT_A_TIME, retries=1
            )
            chunks = all_of(client.follow(job, timeout=JOB_TIMEOUT))
            status = client.status(job)
            self.assertEqual(status.phase, Phase.FAILED, status.reason)
            self.assertTrue(
                status.reason.startswith("1 of 8 tasks failed after their retries; the first, task 5 on ")
                and status.reason.endswith(": exited with status 3"),
                status.reason,
            )
            # What was asked for, as the home read it from the signed request.
            self.assertEqual(status.request.tasks, Tasks(8, 1, zorilla.TASK_ARGS_FILE))
            self.assertEqual((status.request.min_workers, status.request.max_workers), (1, ONE_AT_A_TIME))
            tasks = status.tasks
            self.assertIsNotNone(tasks)
            self.assertEqual(
                (tasks.count, tasks.waiting, tasks.running, tasks.done, tasks.failed), (8, 0, 0, 7, 1)
            )
            self.assertEqual(list(tasks.failed_tasks), [5])
            failed = tasks.failed_tasks[5]
            self.assertEqual((failed.code, failed.exit_status), (OutcomeCode.EXITED, 3))
            self.assertEqual(failed.node, self.node.peer)
            self.assertFalse(failed.succeeded)
            # The home keeps no record of ended tasks: ranks are the running ones.
            self.assertEqual(status.ranks, {})
            # Task 5 ran twice (once more for its retry); the others once,
            # each its own line's parameter, as task i of 8.
            stderr = b"".join(c.data for c in chunks if c.stderr)
            self.assertEqual(stderr.count(b"sweep: task 5 asked to fail"), 2, stderr)
            expected = {i: f"task {i} of 8: {10 + i}^2 = {(10 + i) ** 2}\n".encode() for i in range(8) if i != 5}
            for i, line in expected.items():
                stdout = b"".join(c.data for c in chunks if c.rank == i and not c.stderr)
                self.assertEqual(stdout, line)
            # Outputs per task: task i's under i/.
            outputs = client.outputs(job)
            self.assertEqual(
                sorted((o.rank, o.path) for o in outputs), [(i, "result.txt") for i in sorted(expected)]
            )
            for i, line in expected.items():
                self.assertEqual(client.read_output(job, f"{i}/result.txt"), line)
            fetched = client.fetch(job, self.dir / "sweep")
            self.assertEqual(len(fetched), 7)
            self.assertEqual((self.dir / "sweep" / "3" / "result.txt").read_bytes(), expected[3])
            self.assertFalse((self.dir / "sweep" / "5").exists())

    def test_an_array_of_a_request_of_its_own_completes(self):
        with self.connect(self.alice) as client:
            # An array as a JobRequest, its lines in an input of the job's
            # own; then one of a count alone, each task squaring its index.
            params = JobRequest.array(3, max_running=ONE_AT_A_TIME, args_file="params.txt")
            job = client.submit(module("sweep"), params, inputs={"params.txt": b"7\n8\n9\n"})
            status = client.wait(job, timeout=JOB_TIMEOUT)
            self.assertEqual(status.phase, Phase.COMPLETED, status.reason)
            self.assertEqual(status.reason, "all 3 tasks exited with status 0")
            self.assertEqual(status.tasks.count, 3)
            self.assertEqual((status.tasks.done, status.tasks.failed, status.tasks.failed_tasks), (3, 0, {}))
            self.assertEqual(
                [client.read_output(job, f"{i}/result.txt") for i in range(3)],
                [b"task 0 of 3: 7^2 = 49\n", b"task 1 of 3: 8^2 = 64\n", b"task 2 of 3: 9^2 = 81\n"],
            )
            counted = client.submit_array(module("sweep"), 4, max_running=ONE_AT_A_TIME)
            status = client.wait(counted, timeout=JOB_TIMEOUT)
            self.assertEqual(status.phase, Phase.COMPLETED, status.reason)
            self.assertEqual(status.request.tasks, Tasks(4))
            self.assertEqual(status.request.max_workers, ONE_AT_A_TIME)
            self.assertEqual((status.tasks.count, status.tasks.done), (4, 4))
            self.assertEqual(
                {o.name: client.read_output(counted, o.name) for o in client.outputs(counted)},
                {f"{i}/result.txt": f"task {i} of 4: {i}^2 = {i * i}\n".encode() for i in range(4)},
            )
            # A job of ranks has no tasks.
            self.assertIsNone(client.status(self.submit_hello(client)).tasks)

    def test_a_large_output_is_read_block_by_block(self):
        mib = 5  # two blocks of at most 4 MiB
        with self.connect(self.alice) as client:
            job = client.submit(module("big"), JobRequest(args=[str(mib)]))
            self.assertEqual(client.wait(job, timeout=JOB_TIMEOUT).phase, Phase.COMPLETED)
            self.assertEqual([(o.name, o.size) for o in client.outputs(job)], [("0/big.bin", mib << 20)])
            blocks = all_of(client.output_blocks(job, "0/big.bin"))
            self.assertEqual([len(b) for b in blocks], [4 << 20, 1 << 20])
            # examples/src/big.c: xorshift32 from 1, 4 bytes little-endian each.
            expected = bytearray()
            x = 1
            for _ in range((mib << 20) // 4):
                x ^= (x << 13) & 0xFFFFFFFF
                x ^= x >> 17
                x ^= (x << 5) & 0xFFFFFFFF
                expected += x.to_bytes(4, "little")
            self.assertTrue(b"".join(blocks) == expected, "big.bin is not what big.c writes")
            (path,) = client.fetch(job, self.dir / "big")
            self.assertTrue(path.read_bytes() == expected)

    def test_another_users_key_is_refused_for_someone_elses_job(self):
        with self.connect(self.alice) as alice:
            job = self.submit_hello(alice)
            self.assertEqual(alice.wait(job, timeout=JOB_TIMEOUT).phase, Phase.COMPLETED)
        with self.connect(self.bob) as bob:
            # Bob sees that the job exists, whose it is and how large ...
            public = bob.status(job)
            self.assertEqual((public.job, public.phase, public.owner), (job, Phase.COMPLETED, self.alice.id))
            self.assertEqual((public.reason, public.ranks, public.request.args), ("", {}, []))
            # ... and nothing else of it, nor may he change it.
            refusals = [
                lambda: bob.logs_page(job),
                lambda: bob.outputs(job),
                lambda: bob.read_output(job, "0/greeting.txt"),
                lambda: bob.cancel(job),
                lambda: bob.resize(job, 4),
            ]
            for refused in refusals:
                with self.assertRaises(UnauthorizedError) as caught:
                    refused()
                self.assertIn(self.alice.id, caught.exception.message)
            # The connection goes on after each refusal.
            self.assertEqual(bob.node_info().peer, self.node.peer)
            # Bob's list shows Alice's jobs as anybody sees them.
            listed = {s.job: s for s in bob.list()}
            self.assertEqual(listed[job].owner, self.alice.id)
            self.assertEqual(listed[job].ranks, {})

    def test_a_job_is_resized_and_cancelled(self):
        with self.connect(self.alice) as client:
            # idle waits for a message that never comes, until cancelled.
            job = client.submit(module("idle"), JobRequest(min_workers=1, max_workers=2))
            chunks = client.follow(job, timeout=JOB_TIMEOUT)
            self.assertIn(b"idle rank", next(chunks).data)
            resized = client.resize(job, 3)
            self.assertEqual(resized.request.max_workers, 3)
            client.cancel(job)
            rest = all_of(chunks)  # ends when the job does
            self.assertIsInstance(rest, list)
            final = client.status(job)
            self.assertEqual(final.phase, Phase.CANCELLED, final.reason)

    def test_the_local_node_is_found_as_the_zorilla_tool_finds_it(self):
        saved = dict(os.environ)
        try:
            for name in ("ZORILLA_NODE", "ZORILLA_STATE_DIR", "ZORILLA_TOKEN"):
                os.environ.pop(name, None)
            os.environ["ZORILLA_STATE_DIR"] = str(self.node.state_dir)
            with Client.connect(user=self.alice) as client:
                self.assertEqual(client.peer, self.node.peer)
            os.environ["ZORILLA_NODE"] = self.node.client
            os.environ["ZORILLA_STATE_DIR"] = str(self.dir / "nowhere")
            with Client.connect(user=self.alice) as client:
                self.assertEqual(client.peer, self.node.peer)
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def test_the_nodes_errors_arrive_as_their_exceptions(self):
        with self.connect(self.alice) as client:
            with self.assertRaises(NotFoundError) as caught:
                client.status(42)
            self.assertIn("000000000000002a", caught.exception.message)
            with self.assertRaises(BadRequestError) as caught:
                client.submit(module("hello"), JobRequest(cores=0))
            self.assertIn("cores is 0", caught.exception.message)
            with self.assertRaises(BadRequestError) as caught:
                client.submit(b"not wasm")
            self.assertIn("module refused", caught.exception.message)
            # What the client does not check ahead: the node's sentence.
            with self.assertRaises(BadRequestError) as caught:
                client.submit(module("sweep"), JobRequest.array(3, args_file="params.txt"))
            self.assertIn("the task arguments file cannot be used: it is not one of the job's inputs",
                          caught.exception.message)
            with self.assertRaises(BadRequestError) as caught:
                client.submit(module("sweep"), JobRequest.array(3, args_file="p"), inputs={"p": b"1\n2\n"})
            self.assertIn("it has 2 lines, but the job has 3 tasks", caught.exception.message)
            # What it does: refused before anything is sent.
            with self.assertRaises(ValueError) as caught:
                client.submit_array(module("sweep"), 10001)
            self.assertEqual(str(caught.exception), "tasks is 10001, but must be from 1 to 10000")
            # A mistake leaves the connection usable.
            info = client.node_info()
            self.assertEqual(info.peer, self.node.peer)
            self.assertEqual(info.cores, 2)
            self.assertIsInstance(client.peers(), list)
        saved = zorilla.client.PROTOCOL_VERSION
        zorilla.client.PROTOCOL_VERSION = 1
        try:
            with self.assertRaises(VersionError) as caught:
                self.connect(self.alice)
            self.assertIn("this node speaks 3", caught.exception.message)
        finally:
            zorilla.client.PROTOCOL_VERSION = saved


class ANodeWithAToken(unittest.TestCase):
    """A node with a token: every client must present it, and one that does
    is the node's admin."""

    TOKEN = "python-test-token-0123456789"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="zorilla-python-")
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.node = Node(Path(cls.tmp.name) / "node", token=cls.TOKEN)
        cls.addClassCleanup(cls.node.stop)

    def test_the_token_is_needed_and_makes_its_holder_admin(self):
        alice, carol = UserKey.generate(), UserKey.generate()
        with self.assertRaises(UnauthorizedError) as caught:
            Client.connect(self.node.client, user=alice, token=None)
        self.assertIn("needs a token", caught.exception.message)
        with self.assertRaises(UnauthorizedError) as caught:
            Client.connect(self.node.client, user=alice, token="a-wrong-token-0123456")
        self.assertIn("wrong token", caught.exception.message)
        with Client.connect(self.node.client, user=alice, token=self.TOKEN) as client:
            job = client.submit(module("hello"), inputs={"name.txt": b"admin"})
            self.assertEqual(client.wait(job, timeout=JOB_TIMEOUT).phase, Phase.COMPLETED)
        # Another user with the token is the node's admin: it sees all.
        with Client.connect(self.node.client, user=carol, token=self.TOKEN) as admin:
            self.assertEqual(admin.read_output(job, "0/greeting.txt"), b"Hello, admin!\n")
            self.assertEqual(admin.status(job).owner, alice.id)


if __name__ == "__main__":
    unittest.main()
