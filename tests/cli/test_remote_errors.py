"""A remote cache root that cannot be read is one line, whatever chain zarr and fsspec raise the
cause through (it was 90 to 950 lines of botocore's or aiohttp's traceback)."""

from __future__ import annotations

import os

import click
import pytest
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse.cli.errors import friendly_errors


def _raising(exc: BaseException):
    @click.command()
    @friendly_errors
    def command():
        try:
            raise exc
        except BaseException as cause:
            raise RuntimeError("zarr's read failed") from cause  # as zarr and fsspec pass it on

    return command


def test_no_credentials_and_an_endpoint_that_does_not_answer_are_one_line():
    botocore = pytest.importorskip("botocore.exceptions")
    line = one_error_line(CliRunner().invoke(_raising(botocore.NoCredentialsError())))
    assert line == "error: the cache root could not be read (NoCredentialsError: Unable to locate credentials)"
    down = botocore.EndpointConnectionError(endpoint_url="http://127.0.0.1:5099/bkt")
    line = one_error_line(CliRunner().invoke(_raising(down)))
    assert "EndpointConnectionError" in line and "http://127.0.0.1:5099/bkt" in line


def test_a_server_gone_mid_read_is_one_line():
    aiohttp = pytest.importorskip("aiohttp")
    gone = aiohttp.ClientPayloadError("Response payload is not completed (received 0 of 786436 bytes)")
    line = one_error_line(CliRunner().invoke(_raising(gone)))
    assert line.startswith("error: the cache root could not be read (ClientPayloadError: Response payload")


def test_any_other_error_is_still_raised():
    result = CliRunner().invoke(_raising(ValueError("a bug")))
    assert result.exit_code == 1 and isinstance(result.exception, RuntimeError)


def test_an_object_store_refusal_names_the_root_it_was_given():
    """s3fs turns a 403 into a bare PermissionError('Forbidden'): the line names the root the command
    was given, as an error of a local file names the file."""
    botocore = pytest.importorskip("botocore.exceptions")
    s3_errors = pytest.importorskip("s3fs.errors")
    refused = botocore.ClientError({"Error": {"Code": "AccessDenied", "Message": "Forbidden"}}, "HeadObject")

    @click.command()
    @click.option("--cache-dir")
    @friendly_errors
    def command(cache_dir):
        raise s3_errors.translate_boto_error(refused)

    line = one_error_line(CliRunner().invoke(command, ["--cache-dir", "s3://bkt/root"]))
    assert line == "error: Forbidden (s3://bkt/root)"
    local = one_error_line(CliRunner().invoke(command, ["--cache-dir", "/data/root"]))
    assert local == "error: Forbidden"  # no URL given: nothing to name


def test_a_reader_gone_from_the_pipe_ends_quietly():
    """`layerfuse ls | head -1` said "error: Broken pipe" and exited 1; a Unix tool ends quietly (141)."""
    result = CliRunner().invoke(_pipe_closed())
    assert result.exit_code == 141 and result.output == ""


def _pipe_closed():
    @click.command()
    @friendly_errors
    def command():
        raise BrokenPipeError(32, "Broken pipe")

    return command


BROKEN_ELSEWHERE = """
import click
from layerfuse.cli.errors import friendly_errors

@click.command()
@friendly_errors
def command():
    click.echo("a line")
    raise BrokenPipeError(32, "Broken pipe")  # a worker's pipe, say: not the output's

command()
"""


def test_a_broken_pipe_that_is_not_the_output_is_an_error_said(tmp_path):
    """A pipe to a worker process broke (its interpreter could not start): taken for a reader gone from
    stdout, the command ended 141 with nothing said, and a batch job's log showed nothing."""
    import subprocess
    import sys

    with open(tmp_path / "out.txt", "w") as out:
        done = subprocess.run([sys.executable, "-c", BROKEN_ELSEWHERE], stdout=out, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == "error: Broken pipe (a pipe to another process, not the output)"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader gone (`| head` done): the output's pipe is the broken one, quiet as ever
    try:
        piped = subprocess.run([sys.executable, "-c", BROKEN_ELSEWHERE], stdout=write_end, stderr=subprocess.PIPE,
                               text=True, timeout=60)
    finally:
        os.close(write_end)
    assert piped.returncode == 141 and piped.stderr == ""
