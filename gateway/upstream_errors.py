"""What the gateway's engine client (gateway.upstream) raises when an engine cannot be reached or its answer is cut;
its module docstring says when each is raised."""


class UpstreamUnreachable(Exception):
    """No answer began: see gateway.upstream's docstring."""


class UpstreamRefused(UpstreamUnreachable):
    """The address policy refuses where an external endpoint is now (its words): nothing was sent there."""


class UpstreamBroken(Exception):
    """An answer was cut before its end."""
