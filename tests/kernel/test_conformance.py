"""The official kernel conformance suite (jupyter_kernel_test), with every
attribute set, against `ldist kernel`."""
import unittest

import jupyter_kernel_test

from conftest import KERNEL


class LdistKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = KERNEL
    language_name = "lua"
    file_extension = ".lua"

    code_hello_world = 'print("hello, world")'
    code_stderr = 'io.stderr:write("something went wrong\\n")'

    completion_samples = [
        {"text": "pri", "matches": {"print"}},
        {"text": "string.up", "matches": {"upper"}},
        {"text": "math.fl", "matches": {"floor"}},
        {"text": "coroutine.is", "matches": {"isyieldable"}},
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

    code_inspect_sample = "print"
    code_clear_output = "clear_output()"


if __name__ == "__main__":
    unittest.main()
