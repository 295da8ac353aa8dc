"""The tff.program glue every task shares: the task registry (`tasks`), the commands (`commands/`),
the executor flags (`executor`), user errors (`errors`) and the config docs (`config_doc`)."""
