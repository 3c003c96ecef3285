"""Extra service `minio`: S3-compatible storage; the app gets the AWS_* and S3_* variables SDKs read."""

from __future__ import annotations

from orchestrator.plugin_api import RenderContext, ServiceSpec, ServiceWiring, hookimpl

NAME = "minio"
ACCESS_KEY = "preview"


@hookimpl(trylast=True)
def po_services() -> list[ServiceSpec]:
    return [ServiceSpec(name=NAME, description="MinIO object storage (S3 API)",
                        app_variables=["AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                       "AWS_REGION", "S3_ENDPOINT", "S3_BUCKET"])]


@hookimpl(trylast=True)
def po_extra_service(service: str, context: RenderContext) -> ServiceWiring | None:
    if service != NAME:
        return None
    secret = context.db_password
    return ServiceWiring(
        services={NAME: {
            "image": context.image("minio/minio:RELEASE.2024-10-13T13-34-11Z"),
            "command": ["server", "/data"],
            "environment": {"MINIO_ROOT_USER": ACCESS_KEY, "MINIO_ROOT_PASSWORD": secret},
            "volumes": ["minio-data:/data"],
        }},
        volumes={"minio-data": {}},
        app_env={
            "AWS_ENDPOINT_URL": "http://minio:9000", "S3_ENDPOINT": "http://minio:9000",
            "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_REGION": "us-east-1", "S3_BUCKET": f"pr-{context.pr_number}",
        },
    )
