"""Fills a config template's {{NAME}} placeholders: python3 render.py TEMPLATE NAME=VALUE..."""
import sys
from pathlib import Path

text = Path(sys.argv[1]).read_text()
for pair in sys.argv[2:]:
    name, value = pair.split("=", 1)
    text = text.replace("{{" + name + "}}", value)
sys.stdout.write(text)
