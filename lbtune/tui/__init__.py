"""The live monitor (`lbtune monitor`): a Textual app over observe's sample stream.

`feed` says where ticks come from (live host, recording, recorded tree), `frame` computes
what the panels show (no textual), `panels/` draw it, `app` wires keys, workers and messages.
"""
