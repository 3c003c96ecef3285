"""Host adapters: the programs and services outside the process, each behind one class (git, nginx, the code
host's REST API, the command runner, health probes, build_commands). They import no flow, event or HTTP module."""
