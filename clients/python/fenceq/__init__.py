"""fenceq: a client and a fencing worker for the fenceq job queue.

    from fenceq import Client, Worker

Standard library only. The request and reply types (fenceq.types) are
generated from the server's OpenAPI document."""

from . import _models as types
from ._client import APIError, Client, TransportError
from ._models import Job
from ._worker import ClaimLost, Done, Failure, JobContext, Worker

__all__ = ["APIError", "ClaimLost", "Client", "Done", "Failure", "Job", "JobContext", "TransportError",
           "Worker", "types"]
