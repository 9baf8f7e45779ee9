"""A script whose own argparse refuses the command line (it exits with status 2)."""

import argparse

from _loop import steps

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
args = parser.parse_args()
for _ in steps():
    pass
