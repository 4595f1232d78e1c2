"""The program database: jobs, programs, proposals and the MAP-Elites + islands archive.

``archive`` is the pure selection logic (no database code); ``models`` the tables; ``engine`` the
engine, sessions and migrations; ``repository`` the async functions the services call;
``job_store`` one job's unit of work for its controller (locks, transactions, batched writes).
Nothing is imported here, so that importing the pure ``archive`` never pulls in SQLAlchemy.
"""
