"""The `slotflow` command line: commands go to Kafka, queries go to the read-model API.

Nothing here imports the api service; commands are built from the contract models and published
through `slotflow.commands.publish_command`, the same helper the api uses.
"""
