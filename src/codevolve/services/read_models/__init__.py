"""Read models: what the command line, the API and the dashboard show of a job (status,
programs, LLM usage, the run report). They read; they never change a job."""
