# Kernel configuration for `make book` only: the Makefile copies this file into
# _build/ipython/profile_default/ and points IPYTHONDIR there for the build.
#
# Why: every executed page starts a kernel, and ipykernel logs "Kernel is running over TCP
# without encryption ..." each time (nbclient always uses TCP on 127.0.0.1). That line is the
# kernel's own log record, not a Python warning, so PYTHONWARNINGS cannot reach it and
# Sphinx's -W never sees it. This filter drops that one record; every other kernel log line,
# and every Sphinx warning, still reaches the terminal.
import logging

TRANSPORT_NOTICE = "Kernel is running over TCP without encryption"


class DropTransportNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return TRANSPORT_NOTICE not in record.getMessage()


c = get_config()  # noqa: F821 - IPython defines get_config() for its config files

# traitlets merges this into the kernel's logging setup; "console" is its stderr handler.
c.IPKernelApp.logging_config = {
    "filters": {"drop_transport_notice": {"()": DropTransportNotice}},
    "handlers": {"console": {"filters": ["drop_transport_notice"]}},
}
