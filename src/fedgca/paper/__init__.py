"""The paper's reproduction: its published figures (``published/``, with their provenance), the scorecard that sets
fedgca's runs beside every cell and claim (``scorecard``, ``scorecard_tables``, ``runs``), the protocol-variant
tables (``variants``) and how a cell is judged (``verdicts``). Built on the general reporting code
(``fedgca.reporting``); nothing below it reads the paper's figures."""
