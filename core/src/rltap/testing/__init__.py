"""rltap.testing"""
