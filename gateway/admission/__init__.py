"""Admission: a slot (lease) per running request, waiting in a queue when the model is full."""

from gateway.admission.base import Admission, Lease, Ticket

__all__ = ["Admission", "Lease", "Ticket"]
