from pydantic import BaseModel, Field

KEYS_NOTE = "null when API keys are configured (then openapi.yaml documents the API)."


class ServiceIndex(BaseModel):
    service: str
    version: str
    summary: str
    docs: str | None = Field(description=f"Swagger UI; {KEYS_NOTE}")
    redoc: str | None = Field(description=f"ReDoc; {KEYS_NOTE}")
    openapi: str | None = Field(description=f"The OpenAPI document; {KEYS_NOTE}")
    health: str
