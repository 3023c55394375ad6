"""`pykubelet server` logs each request only when asked (upstream's apiserver: httplog at -v=3)."""

import logging
from collections.abc import Iterator

import pytest

from pykubelet.server.main import build_parser, configure_logging


@pytest.fixture
def access_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("aiohttp.access")
    level = logger.level
    try:
        yield logger
    finally:
        logger.setLevel(level)


@pytest.mark.parametrize(("flags", "logged"), [([], False), (["--access-log"], True), (["-v"], True)])
def test_requests_are_logged_only_with_access_log_or_verbose(access_logger: logging.Logger, flags: list[str],
                                                             logged: bool) -> None:
    configure_logging(build_parser().parse_args(flags))
    assert access_logger.isEnabledFor(logging.INFO) is logged
