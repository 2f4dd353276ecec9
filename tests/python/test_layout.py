"""The ctypes structures of verl_reward._lib against the C compiler's layout of
include/verl_reward/client.h and text.h (sizes, every field's offset, the constants)."""

import ctypes
import json
import os
import subprocess
import unittest

import vr_testlib
from verl_reward import _lib, text

STRUCTS = dict(_lib.STRUCTS, **text.STRUCTS)


class LayoutTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        probe = os.path.join(vr_testlib.TESTS_BIN, "vr_py_layout_probe")
        if not os.access(probe, os.X_OK):
            raise AssertionError("layout probe not built at %s" % probe)
        cls.c = json.loads(subprocess.run([probe], capture_output=True, check=True, timeout=30).stdout)

    def test_constants(self):
        self.assertEqual(self.c["VR_MAX_COMPONENTS"], _lib.VR_MAX_COMPONENTS)
        self.assertEqual(self.c["VR_COMPONENT_NAME_MAX"], _lib.VR_COMPONENT_NAME_MAX)

    def test_structs(self):
        self.assertEqual(set(self.c) - {"VR_MAX_COMPONENTS", "VR_COMPONENT_NAME_MAX"}, set(STRUCTS))
        for cname, cls in STRUCTS.items():
            with self.subTest(struct=cname):
                want = self.c[cname]
                self.assertEqual(ctypes.sizeof(cls), want["size"])
                got = {name: getattr(cls, name).offset for name, _ in cls._fields_}
                self.assertEqual(got, want["fields"])


if __name__ == "__main__":
    unittest.main()
