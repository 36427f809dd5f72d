"""The schema of a session request, its validation, and templates merged under it.

A request (REST body, ``%bai`` options, kernelspec metadata) and a stored
template share one JSON shape. :data:`FIELDS` is the single table that parses
and documents that shape, so the docs (:func:`field_help`) and the validation
cannot drift apart.

``null`` means "not set" at every level: a top-level field that is ``null``
takes the :class:`~bai_jupyter.model.SessionSpec` default, and a ``null``
entry inside ``env`` or ``resources`` is dropped. Together with :func:`merge`,
where a ``null`` in the request replaces the template's value, this lets a
request clear what a template set (``{"env": {"DEBUG": null}}``).
"""

from __future__ import annotations

from .bounds import IMAGE_RE, NAME_RE, RESERVED_PORTS, RESERVED_PORTS_TEXT
from .parsers import SpecError, parse_service_ports
from .schema import FIELDS, SpecField, field_help, parse_spec, spec_to_json, validate_partial
from .templates import Template, apply_template, merge

__all__ = [
    "FIELDS",
    "IMAGE_RE",
    "NAME_RE",
    "RESERVED_PORTS",
    "RESERVED_PORTS_TEXT",
    "SpecError",
    "SpecField",
    "Template",
    "apply_template",
    "field_help",
    "merge",
    "parse_service_ports",
    "parse_spec",
    "spec_to_json",
    "validate_partial",
]
