"""The official kernel conformance suite (jupyter_kernel_test), with every
attribute set, against `ldist kernel`; plus, in the suite's own style, what
its version 0.7 has no attribute for: stdin (input_request), display
updates (update_display_data) and interrupts."""
import time
import unittest

import jupyter_kernel_test
from jupyter_kernel_test import TIMEOUT, validate_message

from conftest import KERNEL

# objects for the completion and inspect samples: a model, one of its layers,
# an optimizer (run once the kernel has started)
SETUP = """
model = nn.Sequential{nn.Dense(4, "relu"), nn.Dense(2)}
model:compile{optimizer = optim.Adam(), loss = losses.MeanSquaredError()}
layer = model.layers[1]
opt = optim.SGD()
"""


class LdistKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = KERNEL
    language_name = "lua"
    file_extension = ".lua"

    code_hello_world = 'print("hello, world")'
    code_stderr = 'io.stderr:write("something went wrong\\n")'

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        reply = cls.kc.execute_interactive(SETUP, timeout=TIMEOUT, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok", reply["content"]

    completion_samples = [
        {"text": "pri", "matches": {"print"}},
        {"text": "string.up", "matches": {"upper"}},
        {"text": "math.fl", "matches": {"floor"}},
        {"text": "coroutine.is", "matches": {"isyieldable"}},
        # methods (through the metatables of userdata) and fields
        {"text": "model:fi", "matches": {"fit"}},
        {"text": "model:eval", "matches": {"evaluate"}},
        {"text": "model.lay", "matches": {"layers"}},
        {"text": "model.layers[2]:get_c", "matches": {"get_config"}},
        {"text": "layer.class_", "matches": {"class_name"}},
        {"text": "opt:apply_", "matches": {"apply_gradients"}},
        {"text": "opt.learning_", "matches": {"learning_rate"}},
        {"text": "io.stdout:wri", "matches": {"write"}},
    ]

    complete_code_samples = ["1", 'print("hello, world")', "x = 1", "function f() end",
                             "for i = 1, 2 do end", "x = 1\nx", "?print"]
    incomplete_code_samples = ["function f()", "for i = 1, 3 do", "if x then", "x = {",
                               'print("a",', "s = [[long", "repeat"]
    invalid_code_samples = ["1 +* 2", "end", "x = = 1", 'print("unterminated)', "local 1 = 2"]

    code_page_something = "help(print)"
    code_generate_error = 'error("boom")'

    code_execute_result = [
        {"code": "6*7", "result": "42"},
        {"code": '"a" .. "b"', "result": '"ab"'},
        {"code": "x = 3\nx + 1", "result": "4"},
        {"code": "tensor.ones(2)", "mime": "text/html"},
    ]
    code_display_data = [
        {"code": 'display(display.html("<b>hi</b>"))', "mime": "text/html"},
        {"code": 'display({["text/markdown"] = "# hi"}, {raw = true})', "mime": "text/markdown"},
        {"code": "display(plot({3, 1, 2}))", "mime": "image/svg+xml"},
    ]

    code_history_pattern = "6?7"
    supported_history_operations = ("tail", "range", "search")

    code_inspect_sample = "model:fit"
    code_clear_output = "clear_output()"

    # ---- what jupyter_kernel_test 0.7 has no attribute for ------------------------

    code_generate_input = 'answer = io.read("l"); answer .. "!"'
    code_update_display = 'h = display("first", {display_id = true}); h:update("second")'
    code_long_running = "while true do end"

    def test_stdin(self):
        """The kernel asks the front end for input (input_request) and reads the reply."""
        self.flush_channels()
        msg_id = self.kc.execute(self.code_generate_input, allow_stdin=True)
        req = self.kc.get_stdin_msg(timeout=TIMEOUT)
        # (not validate_message: the suite's msgspec wants a number for the
        # boolean `password` of protocol 5)
        self.assertEqual(req["msg_type"], "input_request")
        self.assertEqual(req["parent_header"]["msg_id"], msg_id)
        self.assertIs(req["content"]["password"], False)
        self.kc.input("forty-two")
        reply = self.get_non_kernel_info_reply(timeout=TIMEOUT)
        validate_message(reply, "execute_reply", msg_id)
        self.assertEqual(reply["content"]["status"], "ok")
        results = self._iopub_until_idle(msg_id)
        texts = [m["content"]["data"]["text/plain"] for m in results if m["msg_type"] == "execute_result"]
        self.assertEqual(texts, ['"forty-two!"'])
        # without allow_stdin, io.read is an error, not a hang
        msg_id = self.kc.execute('io.read("l")', allow_stdin=False)
        reply = self.get_non_kernel_info_reply(timeout=TIMEOUT)
        validate_message(reply, "execute_reply", msg_id)
        self.assertEqual(reply["content"]["status"], "error")
        self._iopub_until_idle(msg_id)

    def test_update_display_data(self):
        """display(x, {display_id = true}) and h:update(y): one display_data, then
        an update_display_data with the same display_id."""
        self.flush_channels()
        reply, msgs = self.execute_helper(self.code_update_display)
        self.assertEqual(reply["content"]["status"], "ok")
        shown = [m for m in msgs if m["msg_type"] == "display_data"]
        updates = [m for m in msgs if m["msg_type"] == "update_display_data"]
        self.assertEqual(len(shown), 1)
        self.assertEqual(len(updates), 1)
        display_id = shown[0]["content"]["transient"]["display_id"]
        self.assertEqual(updates[0]["content"]["transient"]["display_id"], display_id)
        self.assertIn("second", updates[0]["content"]["data"]["text/plain"])

    def test_interrupt(self):
        """An interrupt (the kernelspec's signal mode) stops a running cell with an
        Interrupted error, promptly, and the kernel goes on."""
        self.flush_channels()
        self.execute_helper("kept_before_interrupt = 7")
        msg_id = self.kc.execute(self.code_long_running)
        time.sleep(0.5)
        t0 = time.time()
        self.km.interrupt_kernel()
        reply = self.get_non_kernel_info_reply(timeout=TIMEOUT)
        validate_message(reply, "execute_reply", msg_id)
        self.assertLess(time.time() - t0, 5)
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["ename"], "Interrupted")
        self._iopub_until_idle(msg_id)
        reply, msgs = self.execute_helper("kept_before_interrupt * 6")
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertIn("42", [m["content"]["data"]["text/plain"] for m in msgs
                             if m["msg_type"] == "execute_result"])

    def _iopub_until_idle(self, msg_id):
        out = []
        deadline = time.time() + TIMEOUT
        while time.time() < deadline:
            msg = self.kc.get_iopub_msg(timeout=TIMEOUT)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            validate_message(msg, msg["msg_type"], msg_id)
            out.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return out
        raise AssertionError("no idle status")


if __name__ == "__main__":
    unittest.main()
