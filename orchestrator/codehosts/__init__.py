"""The built-in code host plugins, written as a third party would write one (plugin_api/codehost.py):
`github` (github.py, its payload in github_payload.py), `gitea` for Gitea and Forgejo (gitea.py) and `gitlab`
(gitlab.py)."""
