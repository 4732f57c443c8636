"""The GPU trainer tests use the CPU trainer tests' fixtures (tests/trainer/make_fixtures.py)."""
import pathlib
import runpy
import sys

if __name__ == "__main__":
    runpy.run_path(str(pathlib.Path(__file__).resolve().parents[1] / "trainer" / "make_fixtures.py"),
                   run_name="__main__")
    sys.exit(0)
