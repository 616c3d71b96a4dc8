"""Stage 1, schema: the typed model of a run record, at the bottom of the stages: cells, programs, machine, settings, the
benchmark, audit and pathways records as frozen dataclasses, the writers that build a cell's figures, and the
one codec between them and the JSON document. It imports only ``nbscope._units`` and the standard library, so
the collector that writes a record and every stage that reads one share it."""
