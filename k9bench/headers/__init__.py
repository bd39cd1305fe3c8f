"""Typed, versioned artifact headers: what a file says about itself, besides its records.

Each artifact kind has one frozen class (:mod:`k9bench.headers.kinds`): ``RawHeader`` (``raw_*.json``),
``SimHeader``, ``EvalHeader``, ``JudgeHeader`` (the judge's ``<output>.meta.json`` sidecar, the judge
file itself being a bare list), ``ReportHeader`` (``report_<tag>/report.json``) and ``ManifestHeader``
(``download_manifest.json``). A header is every top-level key of the file except the records; the keys
our writers and the reference write are fields (the nested settings blocks readers use are typed too:
:mod:`k9bench.headers.blocks`), any other key (a newer minor writer's addition) is kept in
``Header.extra`` and written back, never dropped.

What the file declares about itself sits in one top-level block, written by
:func:`k9bench.headers.files.stamped` (the one function every writer goes through)::

    "header": {"kind": "raw", "schema_version": 1, "stage": "inference"}

``stage`` is the stage that wrote the file (``STAGE_KINDS``), written, never guessed. The kinds, their
versions and classes are the stage table's (:data:`k9bench.stage_table.STAGES`: a stage's entry names the
kind it writes and, for the kind's owner, its version and class). A file whose ``schema_version`` is above
what this code reads (``SCHEMA_VERSIONS``) is refused in one line naming the file and both versions
(``NewerSchema``, an :class:`~k9bench.artifact_io.ArtifactError`: exit 2 in every script); a file that names
another kind than its reader reads is refused in one line too. Files without the block are read as before:
one of ours (it has a ``stage`` or ``provenance`` block) as version 1, the reference's (a bare list, or the
SPEC section 2 layouts) as version 1 with ``stage`` None and the kind judged from its keys.
:func:`k9bench.headers.files.read_header` is the one reader.

- :mod:`~k9bench.headers.kinds`: the versions, the stage -> kind table, one class per kind;
- :mod:`~k9bench.headers.blocks`: typed views of the nested blocks readers use (run settings, judge settings);
- :mod:`~k9bench.headers.files`: :func:`read_header`, :func:`header_of`, :func:`stamped`, :class:`NewerSchema`,
  ``find_records`` (a record file split into records and header).
"""
