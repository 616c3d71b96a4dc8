"""Stage 5, render: terminal (rich), markdown and HTML views of what the jobs return; never imports the api
stage except for its types (under ``if TYPE_CHECKING:``)."""
