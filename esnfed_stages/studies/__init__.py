"""The optional studies beside the papers' tables: differential privacy (IncFed, FedIP, FedCLIP
under the Gaussian mechanism) and the selected configs run in Flower's simulation engine."""
