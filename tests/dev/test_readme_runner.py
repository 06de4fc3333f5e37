"""rltap_dev.readme: fenced blocks found as written, placeholders that cannot go stale,
Python blocks with top-level await."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from rltap_dev.readme import CodeBlock, code_blocks, find_blocks, run_python, substitute

MARKDOWN = """# Title

Text with `inline code`.

```sh
rltap serve --port 8000
```

## Python

````python
print("```")
````

~~~
plain
~~~
"""


def test_code_blocks_keep_language_text_line_and_heading(tmp_path: Path) -> None:
    path = tmp_path / "doc.md"
    path.write_text(MARKDOWN)

    assert code_blocks(path) == [
        CodeBlock("sh", "rltap serve --port 8000\n", 6, "Title"),
        CodeBlock("python", 'print("```")\n', 12, "Python"),
        CodeBlock("", "plain\n", 16, "Python"),
    ]
    assert [b.label for b in find_blocks(code_blocks(path), "sh", containing="serve")] == ["sh@6"]


def test_an_unclosed_block_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "doc.md"
    path.write_text("```python\nx = 1\n")
    with pytest.raises(ValueError, match="never closed"):
        code_blocks(path)


def test_substitute_refuses_a_placeholder_that_does_not_occur() -> None:
    assert (
        substitute("url = 'http://h:8000'", {"http://h:8000": "http://x:1"}) == "url = 'http://x:1'"
    )
    with pytest.raises(ValueError, match="does not occur"):
        substitute("url = 'http://h:8000'", {"/models/m": "/tmp/m"})


async def test_run_python_awaits_at_top_level_in_a_real_module() -> None:
    source = (
        "import asyncio\n"
        "from dataclasses import dataclass\n\n"
        "@dataclass\n"
        "class Point:\n"
        "    x: int\n\n"
        "await asyncio.sleep(0)\n"
        "point = Point(3)\n"
    )
    namespace = await run_python(source, name="readme_test_block")

    point = namespace["point"]
    assert point.x == 3
    assert pickle.loads(pickle.dumps(point)) == point  # found by module name, as from a file
