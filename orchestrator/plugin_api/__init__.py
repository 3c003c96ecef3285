"""The public plugin API: everything a plugin imports, from this one module.

    from orchestrator.plugin_api import FrameworkSpec, RenderContext, hookimpl

Read hookspecs.py (every hook, what it is given and what it answers) and one built-in plugin (frameworks/go
is a short one). Names here stay stable; the modules behind them may move.
"""

from orchestrator.common.commands import CommandFailed
from orchestrator.common.commands import run as run_command
from orchestrator.common.deployment_log import DeploymentLog
from orchestrator.common.flow_control import FlowAborted, FlowControl
from orchestrator.common.host_env import HostEnv
from orchestrator.common.labels import DEPLOYMENT_LABEL, OWNER_LABEL, ROLE_LABEL
from orchestrator.common.naming import SHA_PATTERN, branch_problem
from orchestrator.common.problems import describe_problems
from orchestrator.common.safe_yaml import dump_compose
from orchestrator.common.tls import shared_context as shared_tls_context
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.api_client import ApiClient, CodeHostError, RateLimit
from orchestrator.plugin_api.checks import Check
from orchestrator.plugin_api.codehost import ApiCodeHost, CodeHost, CodeHostSpec, unreadable_item
from orchestrator.plugin_api.deliveries import (
    BranchPush,
    Delivery,
    Ignored,
    PayloadModel,
    PullRequestChange,
    PullRequestComment,
    WebhookRejected,
    json_object,
    labels_of,
    signature_matches,
    validated,
)
from orchestrator.plugin_api.hookspecs import PROJECT, hookimpl, hookspec
from orchestrator.plugin_api.issue_comments import find_issue_comment, upsert_issue_comment
from orchestrator.plugin_api.own_settings import OwnSettings, ServerHostSettings, read_own_settings
from orchestrator.plugin_api.preview_config import ConfigError, PreviewConfig
from orchestrator.plugin_api.project_files import ProjectFiles
from orchestrator.plugin_api.runtime import KeptImage, Runtime, RuntimeFailure, RuntimeSpec, SeedFailed, WarmPool
from orchestrator.plugin_api.templating import render_template
from orchestrator.plugin_api.types import (
    DEPENDENCIES_LABEL,
    DEPENDENCIES_STAGE,
    SEED_INPUT,
    SEED_MOUNT,
    AppService,
    BaseDependencies,
    DatabaseSeed,
    DatabaseSpec,
    DatabaseWiring,
    DataSeed,
    Detection,
    FrameworkSpec,
    RenderContext,
    SeedRestore,
    ServiceSpec,
    ServiceWiring,
    database_app_env,
)
from orchestrator.settings import Settings
from orchestrator.state.records import HANDLED_ACTIONS, MAX_PR_NUMBER, PullRequestAction

__all__ = [
    "SHA_PATTERN",
    "branch_problem",
    "describe_problems",
    "Metrics",
    "HANDLED_ACTIONS",
    "MAX_PR_NUMBER",
    "PullRequestAction",
    "DEPLOYMENT_LABEL",
    "OWNER_LABEL",
    "ROLE_LABEL",
    # What a runtime needs to run programs as the built-in ones do (orchestrator/runtime/): docker's environment,
    # the command runner and its failure, the deployment's log, flow control, the compose file's YAML.
    "CommandFailed",
    "HostEnv",
    "Settings",
    "dump_compose",
    "run_command",
    "shared_tls_context",  # for httpx clients a plugin makes: httpx builds a context per client otherwise
    "ApiClient",
    "ApiCodeHost",
    "Check",
    "CodeHost",
    "CodeHostError",
    "CodeHostSpec",
    "Delivery",
    "Ignored",
    "PayloadModel",
    "PullRequestChange",
    "PullRequestComment",
    "BranchPush",
    "RateLimit",
    "WebhookRejected",
    "find_issue_comment",
    "json_object",
    "labels_of",
    "signature_matches",
    "validated",
    "unreadable_item",
    "upsert_issue_comment",
    "PROJECT",
    "AppService",
    "ConfigError",
    "DatabaseSeed",
    "DataSeed",
    "DatabaseSpec",
    "DatabaseWiring",
    "DeploymentLog",
    "Detection",
    "FlowAborted",
    "FlowControl",
    "FrameworkSpec",
    "OwnSettings",
    "ServerHostSettings",
    "PreviewConfig",
    "ProjectFiles",
    "RenderContext",
    "BaseDependencies",
    "DEPENDENCIES_LABEL",
    "DEPENDENCIES_STAGE",
    "Runtime",
    "RuntimeFailure",
    "RuntimeSpec",
    "WarmPool",
    "KeptImage",
    "SeedFailed",
    "SEED_INPUT",
    "SEED_MOUNT",
    "SeedRestore",
    "ServiceSpec",
    "ServiceWiring",
    "database_app_env",
    "hookimpl",
    "hookspec",
    "read_own_settings",
    "render_template",
]
