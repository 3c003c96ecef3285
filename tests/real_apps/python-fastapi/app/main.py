"""Notes on PostgreSQL through SQLAlchemy; DATABASE_URL comes from the preview."""

import os
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel
from sqlalchemy import String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

URL = os.environ["DATABASE_URL"].replace("postgresql://", "postgresql+psycopg://", 1)
engine = create_engine(URL, pool_pre_ping=True)


class Base(DeclarativeBase):
    pass


class Note(Base):
    __tablename__ = "notes"
    id: Mapped[int] = mapped_column(primary_key=True)
    text: Mapped[str] = mapped_column(String(500))


class NewNote(BaseModel):
    text: str


app = FastAPI()


@app.on_event("startup")
def create_tables() -> None:
    Base.metadata.create_all(engine)


@app.get("/", response_class=PlainTextResponse)
def home() -> str:
    message = (Path(__file__).parent.parent / "message.txt").read_text().strip()
    return f"python-fastapi says: {message}\n"


@app.get("/health", response_class=PlainTextResponse)
def health() -> str:
    return "ok"


@app.post("/notes")
def add(note: NewNote) -> dict:
    with Session(engine) as session:
        session.add(Note(text=note.text))
        session.commit()
    return {"ok": True}


@app.get("/notes")
def notes() -> list[str]:
    with Session(engine) as session:
        return [note.text for note in session.scalars(select(Note).order_by(Note.id))]
