"""The host side of the plugins: loads them (plugin_host), reads preview-config.yml of a checkout
(checkout_config), asks the plugins for a compose file (generated) or judges the repository's own
(repository_compose, compose_policy), and plans the files a deploy writes (compose_file).

The names of 0.1's `orchestrator.rendering` module stay importable from here."""

from orchestrator.rendering.compose_file import (
    GENERATED_COMPOSE,
    INJECTED_DOCKERFILE,
    REPO_COMPOSE_OUTPUT,
    RESOURCES,
    PendingStartup,
    RenderedDeployment,
    dump_compose,
    main_process,
    make_context,
    render_deployment,
    rewrite_compose,
    with_startup,
    write_rendered,
)

__all__ = ["GENERATED_COMPOSE", "INJECTED_DOCKERFILE", "REPO_COMPOSE_OUTPUT", "RESOURCES", "PendingStartup",
           "RenderedDeployment", "dump_compose", "main_process", "make_context", "render_deployment",
           "rewrite_compose", "with_startup", "write_rendered"]
